// A pull taken apart: one run each of the pieces a pull is made of, against the same
// loopback registry and the same image, to see where the time goes. Not part of `npm run bench`:
//   bin/node --import tsx bench/pull-profile.ts [MB]
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import { createGunzip } from 'node:zlib';
import { tar } from '../packages/sdk/src/tar.ts';
import { startTestServer } from '../test/harness.ts';
import { TestRegistry } from '../test/registry.ts';

const run = promisify(execFile);
const mb = Number(process.argv[2] ?? 100);
const reg = await TestRegistry.start();
const t = await startTestServer({ storeSizeGb: 8 });
const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-pull-profile-'));
const ms = (t0: number) => `${Math.round(performance.now() - t0)} ms`;
try {
  for (let round = 0; round < 3; round++) {
    const layers = [0, 1, 2, 3].map((l) => tar([{ path: `data/${l}`, data: randomBytes((mb / 4) << 20) }]));
    const pushed = await reg.push(`prof/img${round}`, '1', { layers, config: { Env: ['PATH=/bin'] } });
    const ref = `${reg.host}/prof/img${round}:1`;
    const get = (d: string) => fetch(`${reg.url}/v2/prof/img${round}/blobs/${d}`);
    let t0 = performance.now();
    await Promise.all(pushed.layers.map(async (l) => { for await (const _ of (await get(l.digest)).body!) { /* drained */ } }));
    const fetchOnly = ms(t0);
    t0 = performance.now();
    await Promise.all(pushed.layers.map(async (l) => {
      const h1 = createHash('sha256'); const h2 = createHash('sha256');
      const body = Readable.fromWeb((await get(l.digest)).body! as never);
      await pipeline(body, async function* (src) { for await (const c of src) { h1.update(c); yield c; } }, createGunzip({ chunkSize: 256 << 10 }),
        async function* (src) { for await (const c of src) { h2.update(c); yield c; } }, async (src) => { for await (const _ of src) { /* drained */ } });
    }));
    const fetchUnzipHash = ms(t0);
    t0 = performance.now();
    await run('skopeo', ['copy', '--quiet', '--src-tls-verify=false', '--insecure-policy', `docker://${ref}`, `dir:${path.join(dir, String(round))}`]);
    const skopeo = ms(t0);
    rmSync(path.join(dir, String(round)), { recursive: true, force: true }); // its pages unwritten (as bench/scenarios/images.ts)
    t0 = performance.now();
    await t.sb.images.pull(ref);
    const pull = ms(t0);
    console.log(JSON.stringify({ mb, round, fetchOnly, fetchUnzipHash, skopeo, pull }));
  }
} finally {
  await t.close();
  await reg.close();
  rmSync(dir, { recursive: true, force: true });
}

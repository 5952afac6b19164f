// bin/node --import tsx bench/stowage-fetch.ts [MiB]: a hibernated machine's memory file (half
// random, half zeros and text) stored in the test S3 server, then fetched by another worker's
// MachineStowage by URL (curl into the unpacking) and as a stream through this process, in turns.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { MachineLayout } from '../packages/server/src/machines/layout.ts';
import { MachineStowage } from '../packages/server/src/machines/storage/stowage.ts';
import { Dialer } from '../packages/server/src/util/dialer.ts';
import { startS3 } from '../test/s3.ts';

const MiB = Number(process.argv[2] ?? 256);
const root = mkdtempSync(path.join(tmpdir(), 'shellbase-stowage-bench-'));
const s3 = await startS3();
try {
  const store = s3.store({ prefix: 'bench' });
  const log = pino({ level: 'silent' });
  const on = (name: string) => new MachineStowage(store, new MachineLayout(path.join(root, name), path.join(root, 'cache')), log, new Dialer(path.join(root, name, 'streams')));
  const files = path.join(root, 'files');
  mkdirSync(files);
  execFileSync('bash', ['-c', `{ head -c ${(MiB / 2) << 20} /dev/urandom; seq 1 ${MiB * 40_000} | head -c ${(MiB / 4) << 20}; head -c ${(MiB / 4) << 20} /dev/zero; } > ${files}/ram`]);
  writeFileSync(path.join(files, 'state.bin'), 'devices');
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', path.join(files, 'top.qcow2'), '1G']);
  const stored = await on('a').store({ ram: path.join(files, 'ram'), state: path.join(files, 'state.bin'), disk: [path.join(files, 'top.qcow2')] });
  const locate = store.locate!.bind(store);
  const times: Record<string, number[]> = { url: [], stream: [] };
  for (let i = 0; i < 6; i++) {
    const way = i % 2 === 0 ? 'url' : 'stream';
    store.locate = way === 'url' ? locate : undefined;
    const out = path.join(root, `out${i}`);
    mkdirSync(out);
    const t0 = performance.now();
    await on(`b${i}`).fetch(stored, { ram: path.join(out, 'ram'), state: path.join(out, 'state.bin'), top: path.join(out, 'top.qcow2') });
    times[way].push(performance.now() - t0);
    rmSync(out, { recursive: true, force: true });
  }
  for (const [way, xs] of Object.entries(times)) console.log(`${MiB} MiB memory file fetched ${way === 'url' ? 'by URL (curl)' : 'as a stream through the worker'}: ${xs.map((x) => x.toFixed(0)).join(', ')} ms`);
} finally {
  await s3.stop();
  rmSync(root, { recursive: true, force: true });
}

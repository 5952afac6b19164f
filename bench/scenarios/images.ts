import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { tar } from '../../packages/sdk/src/tar.ts';
import { TestRegistry } from '../../test/registry.ts';
import { latency, pct, time, value, type Bench } from '../lib.ts';

const run = promisify(execFile);

/** A 10-step Dockerfile over the built-in image: settings, files, commands. */
const DOCKERFILE = `FROM debian
ENV APP=/srv/app
WORKDIR /srv/app
COPY requirements.txt ./
RUN wc -l requirements.txt > count
ARG MODE=bench
COPY src/ ./src/
RUN ls src > listing
USER root
EXPOSE 8000
CMD ["python3", "src/main.py"]
`;

/**
 * Scenario 14: images and builds. (1) A rebuild of an unchanged 10-step
 * Dockerfile (every step from the cache), against a query `true` in the same
 * process. (2) A pull of an image of ~100 MB (30 MB with --quick) of
 * incompressible layers from the loopback registry into the layer store,
 * against `skopeo copy` of the same image to a local directory (which stores
 * the blobs as they are: no decompression, no unpacking).
 */
export async function images(b: Bench): Promise<void> {
  const { t } = b;
  const context = tar([
    { path: 'Dockerfile', data: DOCKERFILE }, { path: 'requirements.txt', data: 'flask\nrequests\n' },
    { path: 'src', type: 'dir' }, { path: 'src/main.py', data: 'print("hi")\n' },
  ]);
  const first = await t.sb.build({ context, tag: 'bench-build' });
  if (first.steps.length !== 11) throw new Error(`expected 11 steps (FROM and 10), got ${first.steps.length}`);
  const ctx = t.sb.context('bench-build-query');
  const n = b.quick ? 10 : 30;
  b.baselines.set('query true (SDK, in process)', latency(b, 'query true (SDK, in process)', await time(n, () => ctx.exec('true'))));
  latency(b, 'rebuild of an unchanged 10-step Dockerfile', await time(n, async () => {
    const r = await t.sb.build({ context, tag: 'bench-build' });
    if (!r.steps.every((s) => s.cached)) throw new Error('a step of the rebuild was not cached');
  }), 'query true (SDK, in process)');

  const reg = await TestRegistry.start();
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-bench-images-'));
  try {
    const mb = b.quick ? 30 : 100;
    const rounds = b.quick ? 2 : 3;
    const ours: number[] = [];
    const skopeo: number[] = [];
    for (let i = 0; i < rounds; i++) {
      // Fresh random layers each round: a layer the store has already is not fetched again.
      const layers = [0, 1, 2, 3].map((l) => tar([{ path: `data/${l}`, data: randomBytes((mb / 4) << 20) }]));
      await reg.push(`bench/big${i}`, '1', { layers, config: { Env: ['PATH=/bin'] } });
      const ref = `${reg.host}/bench/big${i}:1`;
      const copy = async () => {
        const out = path.join(dir, String(i));
        const t0 = performance.now();
        await run('skopeo', ['copy', '--quiet', '--src-tls-verify=false', '--insecure-policy', `docker://${ref}`, `dir:${out}`]);
        skopeo.push(performance.now() - t0);
        // Removed at once, its pages unwritten: the kernel's writeback of skopeo's 100 MB would
        // otherwise land in the pull that follows (whose sync would wait for it).
        rmSync(out, { recursive: true, force: true });
      };
      const pull = async () => {
        const t0 = performance.now();
        await t.sb.images.pull(ref);
        ours.push(performance.now() - t0);
      };
      // Each goes first in every other round: neither always runs in what the other left behind.
      if (i % 2 === 0) { await copy(); await pull(); } else { await pull(); await copy(); }
    }
    const base = pct(skopeo, 50);
    value(b, `skopeo copy of a ${mb} MB image to a directory (baseline)`, 'p50', base, 'ms', rounds);
    value(b, `pull of a ${mb} MB image into the layer store`, 'p50', pct(ours, 50), 'ms', rounds);
    b.rows.push({ scenario: `pull of a ${mb} MB image into the layer store`, metric: 'ratio', value: Math.round((pct(ours, 50) / base) * 100) / 100, unit: '×', n: rounds, baseline: 'skopeo copy' });
  } finally {
    await reg.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

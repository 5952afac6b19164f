import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { latency, value, type Bench } from '../lib.ts';

const run = promisify(execFile);

/**
 * Scenario 17, export: a context whose one layer holds 200 MiB (half random bytes, half text)
 * exported (`GET /v1/contexts/{name}/export`, read to its end by curl) against `tar | zstd -3`
 * of the same layer's files on the host, interleaved run by run. Throughput in MB/s; the ratio is
 * export time over the baseline's (≤ 1.43× is ≥ 0.7× its throughput).
 */
export async function transfer(b: Bench): Promise<void> {
  const { t } = b;
  const mb = b.quick ? 40 : 200;
  const runs = b.quick ? 2 : 5;
  await t.sb.contexts.create({ name: 'bench-export', image: 'debian' });
  const ctx = t.sb.context('bench-export');
  const r = await ctx.exec(`head -c ${mb / 2}M /dev/urandom > /root/random && seq 1 100000000 | head -c ${mb / 2}M > /root/text`,
    { timeoutMs: 300_000, limits: { diskMb: mb * 3 } });
  const version = await t.server.engine.deps.metadata.versions.get(r.version);
  const tree = path.join(t.home, 'store', 'layers', version!.layers.at(-1)!, 'tree');
  const baseline: number[] = [];
  const exported: number[] = [];
  for (let i = 0; i < runs; i++) {
    let start = performance.now();
    await run('sh', ['-c', `tar -C '${tree}' -cf - . | zstd -3 -q -c > /dev/null`], { maxBuffer: 1 << 20 });
    baseline.push(performance.now() - start);
    // The client is a process of its own (curl), as a real caller is: the server's event loop is not also the reader's.
    start = performance.now();
    const { stdout } = await run('curl', ['-sS', '--fail', '-o', '/dev/null', '-w', '%{size_download}', '-H', `Authorization: Bearer ${t.key}`, `${t.server.url}/v1/contexts/bench-export/export`]);
    exported.push(performance.now() - start);
    const bytes = Number(stdout);
    if (bytes < (mb / 2) * 2 ** 20) throw new Error(`the export was ${bytes} bytes`);
  }
  b.baselines.set('tar | zstd', latency(b, `export: tar | zstd -3 of a ${mb} MiB layer's files (baseline)`, baseline));
  latency(b, `export: a context of ${mb} MiB, read to its end`, exported, 'tar | zstd');
  const p50 = (s: number[]) => [...s].sort((x, y) => x - y)[Math.floor(s.length / 2)];
  value(b, `export: tar | zstd -3 of ${mb} MiB`, 'MB/s', (mb * 1.048576) / (p50(baseline) / 1000), 'MB/s', runs);
  value(b, `export: a context of ${mb} MiB`, 'MB/s', (mb * 1.048576) / (p50(exported) / 1000), 'MB/s', runs);
}

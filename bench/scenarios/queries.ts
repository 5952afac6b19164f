import { httpClient, latency, pct, time, value, type Bench } from '../lib.ts';

/** Scenarios 1–3: a query's start, queries in parallel, and the cost of committing writes. */
export async function queries(b: Bench): Promise<void> {
  const { t } = b;
  const ctx = t.sb.context('bench');
  // Warm up: fill the scratch and cgroup pools and the page cache before anything is timed.
  for (let w = 0; w < 30; w++) await ctx.exec('true');
  const url = `${t.server.url}/v1/contexts/bench/exec`;
  latency(b, 'query true via HTTP (client in its own process)', await httpClient(b, url, { command: 'true' }), 'bare bwrap');
  latency(b, 'query argv [true] via HTTP (client in its own process)', await httpClient(b, url, { argv: ['true'] }), 'bare bwrap');
  const sdk = await time(b.n, () => ctx.exec('true'));
  latency(b, 'query true via SDK (in the server process)', sdk, 'bare bwrap');
  if (b.baselines.has('runc')) latency(b, 'query true via SDK against runc', sdk, 'runc');

  // 2. Parallel queries on one context: throughput and tail latency.
  for (const c of [1, 2, 4, 8]) {
    const total = b.quick ? 16 : 64;
    const samples: number[] = [];
    let next = 0;
    const started = performance.now();
    await Promise.all(Array.from({ length: c }, async () => {
      while (next++ < total) { const t0 = performance.now(); await ctx.exec(['true']); samples.push(performance.now() - t0); }
    }));
    const secs = (performance.now() - started) / 1000;
    value(b, `queries in parallel, concurrency ${c}`, 'throughput', total / secs, 'queries/s', total);
    value(b, `queries in parallel, concurrency ${c}`, 'p99', pct(samples, 99), 'ms', total);
  }

  // 3. Writing 1 MiB and 100 files, against the same work into /tmp (not part of the context).
  const work = (dir: string) => `head -c 1M /dev/urandom > ${dir}/blob; for i in $(seq 100); do echo $i > ${dir}/f$i; done`;
  const n = Math.ceil(b.n / 4);
  const readOnly = await time(n, () => ctx.exec(`mkdir -p /tmp/w; ${work('/tmp/w')}`));
  b.baselines.set('same work uncommitted', pct(readOnly, 50));
  latency(b, 'query writing 1 MiB and 100 files into /tmp (nothing committed)', readOnly);
  latency(b, 'query writing 1 MiB and 100 files (committed)', await time(n, () => ctx.exec(`mkdir -p /root/w; ${work('/root/w')}`)),
    'same work uncommitted');
}

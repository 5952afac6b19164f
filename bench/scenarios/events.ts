import { latency, type Bench } from '../lib.ts';

/**
 * Scenario 16, events: a listener on `GET /v1/events` (Server-Sent Events, filtered to one
 * context's commits) while queries commit to that context one after another; for each, the time
 * from the query's answer (the commit acknowledged) to its `version.committed` event reaching the
 * listener. Against the query itself as the baseline.
 */
export async function events(b: Bench): Promise<void> {
  const { t } = b;
  const n = b.quick ? 30 : 100;
  await t.sb.contexts.create({ name: 'bench-events', image: 'debian' });
  const ctx = t.sb.context('bench-events');
  const arrived = new Map<string, number>();
  const stream = await t.sb.events.stream({ kinds: ['version.committed'], context: 'bench-events' }, (e) => { arrived.set(String(e.data.version), performance.now()); });
  const queries: number[] = [];
  const lag: number[] = [];
  try {
    for (let i = 0; i < n + 5; i++) {
      const start = performance.now();
      const r = await ctx.exec(`echo ${i} > /root/n`);
      const acked = performance.now();
      while (!arrived.has(r.version)) {
        if (performance.now() - acked > 10_000) throw new Error(`the event of ${r.version} did not come`);
        await new Promise((resolve) => setTimeout(resolve, 0));
      }
      if (i < 5) continue; // warm-up
      queries.push(acked - start);
      lag.push(Math.max(0, arrived.get(r.version)! - acked));
    }
  } finally {
    stream.close();
  }
  b.baselines.set('committing query', latency(b, 'events: a query writing one file, committed (baseline)', queries));
  latency(b, 'events: commit acknowledged to its version.committed at an SSE listener', lag, 'committing query');
}

import { startTestServer } from '../../test/harness.ts';
import { latency, pct, time, value, type Bench } from '../lib.ts';

/**
 * Scenario 8: what power-loss durability costs. The bench's server syncs the layer store and
 * the metadata before acknowledging a write; a second server started here does not
 * (SHELLBASE_DURABLE=0 semantics), and is the baseline. Concurrent writers share syncs.
 */
export async function durability(b: Bench): Promise<void> {
  const loose = await startTestServer({ durable: false, storeSizeGb: 8 });
  try {
    const write = (sb: typeof b.t.sb, name: string) => () => sb.context(name).exec('echo x >> /root/log');
    for (let w = 0; w < 10; w++) { await write(loose.sb, 'd')(); await write(b.t.sb, 'd')(); }
    const n = Math.ceil(b.n / 2);
    b.baselines.set('same write not synced', latency(b, 'query appending a line, not synced (baseline)', await time(n, write(loose.sb, 'd'))));
    latency(b, 'query appending a line, synced before the answer', await time(n, write(b.t.sb, 'd')), 'same write not synced');
    for (const [label, sb] of [['not synced', loose.sb], ['synced', b.t.sb]] as const) {
      const total = b.quick ? 32 : 96;
      const samples: number[] = [];
      let next = 0;
      const started = performance.now();
      await Promise.all(Array.from({ length: 8 }, async (_, i) => {
        while (next++ < total) { const t0 = performance.now(); await write(sb, `par${i}`)(); samples.push(performance.now() - t0); }
      }));
      value(b, `8 writers on 8 contexts, ${label}`, 'throughput', total / ((performance.now() - started) / 1000), 'writes/s', total);
      value(b, `8 writers on 8 contexts, ${label}`, 'p50', pct(samples, 50), 'ms', total);
    }
  } finally {
    await loose.close();
  }
}

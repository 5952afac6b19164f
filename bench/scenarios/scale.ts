import { statSync } from 'node:fs';
import path from 'node:path';
import { latency, time, value, type Bench } from '../lib.ts';

/** Scenario 6: many idle contexts cost rows, not sandboxes; queries stay as fast. */
export async function idleContexts(b: Bench): Promise<void> {
  const { t } = b;
  const count = b.quick ? 10_000 : 100_000;
  const probe = t.sb.context('bench-probe');
  const before = await time(b.n, () => probe.exec(['true']));
  b.baselines.set('before idle contexts', latency(b, 'query argv [true] before the idle contexts', before));
  const dbBytes = () => ['meta.db', 'meta.db-wal'].reduce((sum, f) => {
    try { return sum + statSync(path.join(t.home, f)).size; } catch { return sum; }
  }, 0);
  const rss0 = process.memoryUsage().rss;
  const db0 = dbBytes();
  const started = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: 8 }, async () => {
    while (next < count) await t.sb.contexts.create({ name: `idle-${next++}` });
  }));
  const secs = (performance.now() - started) / 1000;
  value(b, `${count} idle contexts`, 'creation rate', count / secs, 'contexts/s', count);
  value(b, `${count} idle contexts`, 'metadata bytes', dbBytes() - db0, 'bytes', count);
  value(b, `${count} idle contexts`, 'server memory growth', Math.max(0, process.memoryUsage().rss - rss0), 'bytes', count);
  latency(b, `query argv [true] with ${count} idle contexts`, await time(b.n, () => probe.exec(['true'])), 'before idle contexts');
}

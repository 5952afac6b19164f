import { latency, type Bench } from '../lib.ts';

/**
 * Scenario 19, mounts: (1) `true` as a query with one read-only mount against the same query
 * without (goal p50 ≤ 1.05×); (2) 1 MiB written through a writable mount and committed into the
 * mounted context against the same write committed in the query's own context (goal ≤ 1.2×).
 * The two sides alternate sample by sample, each first in every other pair, so the host's drift
 * and whatever one query leaves to the next fall on both. The read-only pair takes 3 × n samples
 * a side: its difference (~0.2 ms) is a few percent of a query, and at n = 100 one run's p50
 * moves by more than that.
 */
export async function mounts(b: Bench): Promise<void> {
  const sb = b.t.sb;
  await sb.context('mnt-vol').exec('mkdir -p /srv/data && head -c 4M /dev/urandom > /srv/data/blob');
  await sb.context('mnt-out').exec('true');
  const ro = [{ context: 'mnt-vol', path: '/mnt/vol', readOnly: true }];
  const rw = [{ context: 'mnt-out', path: '/mnt/out' }];
  const pairs = async (a: () => Promise<unknown>, c: () => Promise<unknown>, n: number) => {
    const x: number[] = [];
    const y: number[] = [];
    const timed = async (f: () => Promise<unknown>, into: number[]) => { const t0 = performance.now(); await f(); into.push(performance.now() - t0); };
    for (let i = 0; i < 5; i++) { await a(); await c(); }
    for (let i = 0; i < n; i++) {
      if (i % 2) { await timed(c, y); await timed(a, x); } else { await timed(a, x); await timed(c, y); }
    }
    return [x, y];
  };
  const [plain, mounted] = await pairs(
    () => sb.context('mnt-q').exec('true'),
    () => sb.context('mnt-q').exec('true', { mounts: ro }),
    3 * b.n,
  );
  b.baselines.set('the same query without a mount', latency(b, 'query `true`, no mount (baseline)', plain));
  latency(b, 'query `true` with one read-only mount', mounted, 'the same query without a mount');

  const write = (to: string) => `head -c 1048576 /dev/urandom > ${to}/blob`;
  const n = Math.ceil(b.n / 2);
  const [own, through] = await pairs(
    () => sb.context('mnt-w').exec(write('/root')),
    () => sb.context('mnt-wq').exec(write('/mnt/out/root'), { mounts: rw }),
    n,
  );
  b.baselines.set('the same write in its own context', latency(b, '1 MiB written and committed in the query\'s context (baseline)', own));
  latency(b, '1 MiB written through a writable mount, committed into it', through, 'the same write in its own context');
}

import { latency, type Bench } from '../lib.ts';

/**
 * Scenario 19, mounts: (1) `true` as a query with one read-only mount against the same query
 * without (goal p50 ≤ 1.05×); (2) 1 MiB written through a writable mount and committed into the
 * mounted context against the same write committed in the query's own context (goal ≤ 1.2×).
 * The two sides alternate sample by sample, so the host's drift falls on both.
 */
export async function mounts(b: Bench): Promise<void> {
  const sb = b.t.sb;
  await sb.context('mnt-vol').exec('mkdir -p /srv/data && head -c 4M /dev/urandom > /srv/data/blob');
  await sb.context('mnt-out').exec('true');
  const ro = [{ context: 'mnt-vol', path: '/mnt/vol', readOnly: true }];
  const rw = [{ context: 'mnt-out', path: '/mnt/out' }];
  const pairs = async (a: () => Promise<unknown>, c: () => Promise<unknown>) => {
    const x: number[] = [];
    const y: number[] = [];
    for (let i = 0; i < 5; i++) { await a(); await c(); }
    for (let i = 0; i < b.n; i++) {
      let t0 = performance.now();
      await a();
      x.push(performance.now() - t0);
      t0 = performance.now();
      await c();
      y.push(performance.now() - t0);
    }
    return [x, y];
  };
  const [plain, mounted] = await pairs(
    () => sb.context('mnt-q').exec('true'),
    () => sb.context('mnt-q').exec('true', { mounts: ro }),
  );
  b.baselines.set('the same query without a mount', latency(b, 'query `true`, no mount (baseline)', plain));
  latency(b, 'query `true` with one read-only mount', mounted, 'the same query without a mount');

  const write = (to: string) => `head -c 1048576 /dev/urandom > ${to}/blob`;
  const n = Math.ceil(b.n / 2);
  const [own, through] = await pairs(
    () => sb.context('mnt-w').exec(write('/root')),
    () => sb.context('mnt-wq').exec(write('/mnt/out/root'), { mounts: rw }),
  );
  b.baselines.set('the same write in its own context', latency(b, '1 MiB written and committed in the query\'s context (baseline)', own.slice(0, n)));
  latency(b, '1 MiB written through a writable mount, committed into it', through.slice(0, n), 'the same write in its own context');
}

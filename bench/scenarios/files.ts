import { httpClient, latency, time, type Bench } from '../lib.ts';

/** Scenario 7: files without a sandbox against a query, and diff. */
export async function files(b: Bench): Promise<void> {
  const { t } = b;
  const ctx = t.sb.context('bench-files');
  await ctx.exec('head -c 4096 /dev/urandom > /root/4k');
  const cat = await httpClient(b, `${t.server.url}/v1/contexts/bench-files/exec`, { argv: ['cat', '/root/4k'], commit: 'never' });
  b.baselines.set('cat as a query', latency(b, 'read a 4 KiB file with cat as a query (HTTP)', cat));
  // Cheap enough to take more samples, which steadies its p50 on a noisy machine.
  latency(b, 'read a 4 KiB file via the files API (HTTP)', await httpClient({ ...b, n: b.n * 5 }, `${t.server.url}/v1/contexts/bench-files/files/root/4k`), 'cat as a query');
  const v1 = (await ctx.exec('echo one > /root/diff-me')).version;
  const v2 = (await ctx.exec('echo two > /root/diff-me')).version;
  latency(b, 'diff of two versions 1 file apart (debian image)', await time(b.n, () => ctx.diff({ from: v1, to: v2 })));
}

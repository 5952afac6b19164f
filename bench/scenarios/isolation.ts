import { Shellbase } from '@shellbase/sdk';
import { latency, time, type Bench } from '../lib.ts';

/** What one attacker tenant runs over and over while another tenant's queries are timed. */
const ATTACKS: [string, string, Record<string, number>][] = [
  ['fork bomb', 'f() { f | f & }; f; sleep 3', { pids: 256 }],
  ['memory bomb', 'python3 -c "b = []\nwhile True: b.append(bytearray(1 << 20))"', { memoryMb: 256 }],
  ['output flood', 'timeout 3 yes', {}],
  ['disk fill', 'head -c 2G /dev/zero > /root/fill', { diskMb: 256 }],
  ['cpu burn', 'timeout 3 sh -c "while :; do :; done"', { cpus: 1 }],
];

/**
 * Scenario 9, noisy neighbours: a tenant's `true` queries while another tenant runs a fork bomb,
 * a memory bomb, an output flood, a disk fill and a cpu burn at once, each within its limits,
 * against the same queries on an idle server. The goal is 2×.
 */
export async function isolation(b: Bench): Promise<void> {
  const { t } = b;
  const key = async (name: string) => (await t.http('POST', '/v1/tenants', { body: { name } })).json.apiKey as string;
  const victim = new Shellbase({ url: t.server.url, apiKey: await key('bench-victim') });
  const attacker = new Shellbase({ url: t.server.url, apiKey: await key('bench-attacker') });
  const ctx = victim.context('quiet');
  for (let w = 0; w < 10; w++) await ctx.exec('true');
  const n = Math.ceil(b.n / 2);
  b.baselines.set('idle server', latency(b, "another tenant's query true, idle server (baseline)", await time(n, () => ctx.exec('true'))));
  let stop = false;
  // SHELLBASE_BENCH_ATTACKS="fork bomb,disk fill" runs only those (to find which one costs what).
  const only = process.env.SHELLBASE_BENCH_ATTACKS?.split(',').map((s) => s.trim());
  const attacks = ATTACKS.filter(([name]) => !only || only.includes(name)).map(async ([name, command, limits]) => {
    while (!stop) await attacker.context(name.replace(' ', '-')).exec(command, { limits, timeoutMs: 10_000, commit: 'never' }).catch(() => undefined);
  });
  await new Promise((r) => setTimeout(r, 1500)); // let every attack get going
  latency(b, "another tenant's query true, during five attacks", await time(n, () => ctx.exec('true')), 'idle server');
  stop = true;
  await Promise.all(attacks);
}

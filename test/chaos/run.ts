import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { check, violations, type Verdict } from './checker.ts';
import { startChaosCluster, type ChaosCluster } from './cluster.ts';
import { FAULT_KINDS, inject, recover, type Fault, type FaultKind } from './nemesis.ts';
import { checkMachines, startMachineWorkload, watchQemu } from './machines.ts';
import { SERVICE_APP, startWorkload, type Op } from './workload.ts';

/**
 * A chaos run: a cluster on a test network (cluster.ts), clients running the workload
 * (workload.ts) all along, the nemesis (nemesis.ts) injecting faults one after another, each
 * followed by a wait for recovery, then the checker (checker.ts) over the history and final state.
 * `npm run chaos` runs it for SHELLBASE_CHAOS_MINUTES (default 15) with every kind in shuffled
 * rounds; test/chaos/chaos.test.ts runs each kind once.
 */
export interface ChaosOptions {
  workers?: number;
  /** Faults in this order, or shuffled rounds of every kind until `minutes` have passed. */
  schedule: FaultKind[] | { minutes: number };
  /** How long each fault holds: a fixed time, or a random one in [min, max]. */
  holdMs?: number | [number, number];
  clients?: number;
  /** Machines too (machines.ts): created, written to, forked, hibernated and read back all along. */
  machines?: boolean;
  /** Called as each fault ends (progress for a person watching). */
  onFault?: (f: Fault) => void;
}

export interface ChaosReport {
  durationMs: number;
  ops: number;
  faults: Fault[];
  /** Per kind: how many, and recovery p50 and max (ms; null when one never recovered). */
  recovery: Record<string, { count: number; p50: number | null; max: number | null }>;
  /** Per kind: what clients saw from the fault's start until recovery, by outcome. */
  seen: Record<string, Record<string, number>>;
  verdict: Verdict;
  violations: number;
}

export const QUOTA = 2;
const CONTEXTS = ['c0', 'c1', 'c2', 'c3'];
/** A fault not recovered from within this is a failure of the run. */
const RECOVERY_LIMIT_MS = 120_000;
const GAP_MS = 1500;

export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const c = await startChaosCluster({ workers: o.workers ?? 3 });
  try {
    const report = await run(c, o);
    if (report.violations) dumpLogs(c);
    return report;
  } catch (e) {
    dumpLogs(c);
    throw e;
  } finally {
    await c.stop();
  }
}

async function run(c: ChaosCluster, o: ChaosOptions): Promise<ChaosReport> {
  const began = Date.now();
  const admin = async (method: string, route: string, body?: unknown) => {
    const r = await fetch(`${c.workers[0].url}${route}`, { method, headers: { authorization: `Bearer ${c.adminKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (r.status >= 300) throw new Error(`${method} ${route}: ${r.status} ${await r.text()}`);
    return r.json() as Promise<Record<string, unknown>>;
  };
  const { apiKey: quotaKey } = await admin('POST', '/v1/tenants', { name: 'chaos-quota', quotas: { concurrentQueries: QUOTA } }) as { apiKey: string };
  for (const x of CONTEXTS) await admin('POST', '/v1/contexts', { name: x });
  const put = await fetch(`${c.workers[0].url}/v1/contexts/svc/files/root/app.py`, { method: 'PUT', headers: { authorization: `Bearer ${c.adminKey}` }, body: SERVICE_APP });
  if (put.status !== 200) throw new Error(`writing the service's program: ${put.status}`);
  const service = await admin('POST', '/v1/contexts/svc/services', { name: 'beat', command: 'python3 /root/app.py', port: 8080, idleTimeoutMs: 1500 }) as { pathUrl: string };
  await fetch(`${c.workers[0].url}/v1/contexts`, { method: 'POST', headers: { authorization: `Bearer ${quotaKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'quota' }) });

  const workload = startWorkload({
    targets: () => c.workers.map((w) => ({ name: w.name, url: w.url, gatewayUrl: w.gatewayUrl })),
    adminKey: c.adminKey, quotaKey, contexts: CONTEXTS, servicePath: new URL(service.pathUrl).pathname, clients: o.clients ?? 6, timeoutMs: 60_000,
  });
  const machines = o.machines ? startMachineWorkload({ targets: () => c.workers.map((w) => ({ name: w.name, url: w.url, gatewayUrl: w.gatewayUrl })), adminKey: c.adminKey, timeoutMs: 120_000 }) : null;
  const qemu = o.machines ? watchQemu(c.workers.map((w) => w.home)) : null;
  const faults: Fault[] = [];
  try {
    await sleep(3000);
    const schedule = Array.isArray(o.schedule) ? [...o.schedule] : [];
    const until = Array.isArray(o.schedule) ? Infinity : began + o.schedule.minutes * 60_000;
    for (;;) {
      if (!Array.isArray(o.schedule)) {
        if (Date.now() >= until) break;
        if (schedule.length === 0) schedule.push(...shuffle([...FAULT_KINDS]));
      }
      const kind = schedule.shift();
      if (!kind) break;
      const hold = o.holdMs ?? 4000;
      const f = await inject(c, kind, typeof hold === 'number' ? hold : hold[0] + Math.random() * (hold[1] - hold[0]));
      f.recoveryMs = await recover(c, CONTEXTS, f.undoneAt, RECOVERY_LIMIT_MS);
      faults.push(f);
      o.onFault?.(f);
      await sleep(GAP_MS);
    }
  } finally {
    await workload.stop();
    await machines?.stop();
    qemu?.stop();
  }
  await recover(c, CONTEXTS, Date.now(), RECOVERY_LIMIT_MS);
  const request = async (route: string, body?: unknown) => {
    for (let attempt = 0; ; attempt++) {
      const w = c.workers[attempt % c.workers.length];
      try {
        const r = await fetch(`${w.url}${route}`, {
          method: body === undefined ? 'GET' : 'POST', signal: AbortSignal.timeout(120_000),
          headers: { authorization: `Bearer ${c.adminKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, body: body === undefined ? undefined : JSON.stringify(body),
        });
        const text = await r.text();
        if (r.status === 503 && attempt < 20) { await sleep(500); continue; }
        let parsed: unknown = null;
        try { parsed = JSON.parse(text); } catch { /* bytes */ }
        return { status: r.status, text, body: parsed };
      } catch (e) {
        if (attempt >= 20) throw e;
        await sleep(500);
      }
    }
  };
  const reader = (route: string) => request(route);
  const verdict = await check(workload.history, reader, CONTEXTS, QUOTA);
  if (machines && qemu) {
    const m = await checkMachines(machines.history, reader, (id, command) => request(`/v1/machines/${id}/exec`, { command }));
    verdict.lost.push(...m.lost);
    verdict.wrong.push(...m.wrong);
    verdict.hung.push(...m.hung);
    verdict.untyped.push(...m.untyped);
    verdict.double.push(...qemu.doubles);
    Object.assign(verdict.outcomes, m.outcomes);
  }
  verdict.crashed.push(...c.crashes);
  for (const f of faults) if (f.recoveryMs === null) verdict.hung.push(`no recovery within ${RECOVERY_LIMIT_MS} ms after ${f.kind} of ${f.target}`);
  return { durationMs: Date.now() - began, ops: workload.history.length, faults, recovery: recoveryOf(faults), seen: seenOf(faults, workload.history), verdict, violations: violations(verdict) };
}

/**
 * The workers' logs: into SHELLBASE_TEST_LOGS (a directory) when set, else on stderr each worker's
 * last 40 errors (an untyped answer's cause is among them, however early it came) and its end.
 */
function dumpLogs(c: ChaosCluster): void {
  const dir = process.env.SHELLBASE_TEST_LOGS;
  for (const w of c.workers) {
    if (dir) { writeFileSync(path.join(dir, `chaos-${w.name}.log`), w.log()); continue; }
    const errors = w.log().split('\n').filter((l) => /"level":(50|60)/.test(l)).slice(-40).map((l) => l.slice(0, 1500));
    console.error(`--- ${w.name}: its last ${errors.length} errors\n${errors.join('\n')}\n--- ${w.name}: its end\n${w.log().slice(-4000)}`);
  }
}

function recoveryOf(faults: Fault[]): ChaosReport['recovery'] {
  const out: ChaosReport['recovery'] = {};
  for (const kind of new Set(faults.map((f) => f.kind))) {
    const ms = faults.filter((f) => f.kind === kind).map((f) => f.recoveryMs);
    const done = ms.filter((x): x is number => x !== null).sort((a, b) => a - b);
    out[kind] = { count: ms.length, p50: done.length ? done[Math.floor((done.length - 1) / 2)] : null, max: done.length === ms.length ? done.at(-1)! : null };
  }
  return out;
}

function seenOf(faults: Fault[], history: Op[]): ChaosReport['seen'] {
  const out: ChaosReport['seen'] = {};
  for (const f of faults) {
    const end = f.undoneAt + (f.recoveryMs ?? 0);
    const seen = (out[f.kind] ??= {});
    for (const op of history) {
      if (op.start < f.startedAt || op.start > end) continue;
      const k = op.outcome === 'error' ? op.code! : op.outcome;
      seen[k] = (seen[k] ?? 0) + 1;
    }
  }
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
function shuffle<T>(xs: T[]): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [xs[i], xs[j]] = [xs[j], xs[i]];
  }
  return xs;
}

// `npm run chaos`: the long run, its report on stdout (and in SHELLBASE_CHAOS_REPORT when set).
if (import.meta.url === `file://${process.argv[1]}`) {
  const minutes = Number(process.env.SHELLBASE_CHAOS_MINUTES ?? 15);
  console.error(`chaos: ${minutes} minutes of faults (${FAULT_KINDS.join(', ')}), each held 2–30 s, against 3 workers`);
  const report = await runChaos({
    schedule: { minutes }, holdMs: [2000, 30_000], machines: process.env.SHELLBASE_CHAOS_MACHINES === '1',
    onFault: (f) => console.error(`chaos: ${f.kind} of ${f.target}: recovered in ${f.recoveryMs ?? 'never'} ms`),
  });
  const text = JSON.stringify(report, (_, x) => (typeof x === 'bigint' ? String(x) : x), 2);
  if (process.env.SHELLBASE_CHAOS_REPORT) writeFileSync(process.env.SHELLBASE_CHAOS_REPORT, text);
  console.log(text);
  process.exit(report.violations ? 1 : 0);
}

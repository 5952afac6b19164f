import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import type { Target } from './workload.ts';

/**
 * Machines in a chaos run: one client that keeps up to four small machines busy (created, written to
 * by appending to /root/log, forked, hibernated, read back) through random workers, recording what
 * was acknowledged; and a watch over this host's QEMU processes (all workers share the host) that
 * finds a machine running under two workers' homes at once. The checker (`checkMachines`) reads each
 * machine's log at the end: every acknowledged line in order, nothing never sent, a fork holding
 * what its source had acknowledged before the fork. A machine whose worker died while it held
 * memory is `lost` (its memory went with the worker): that is its answer, not a violation.
 */
export interface MachineOp {
  id: number;
  kind: 'm-create' | 'm-write' | 'm-fork' | 'm-hibernate' | 'm-read';
  worker: string;
  machine: string;
  start: number;
  end: number;
  outcome: 'ok' | 'error' | 'unreachable' | 'hung';
  code?: string;
  /** The line an `m-write` appended; the forks an `m-fork` made; what an `m-read` got. */
  value?: string;
  forks?: string[];
  read?: string;
}

export interface MachineWorkload {
  history: MachineOp[];
  stop(): Promise<void>;
}

const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)];
/** What the client does, in turn. */
const ROTATION: MachineOp['kind'][] = ['m-create', 'm-write', 'm-write', 'm-read', 'm-hibernate', 'm-write', 'm-fork', 'm-write', 'm-read'];
/** Machines alive at once (each is a 256 MiB guest under TCG): two made, the rest forks. */
const MAX_MACHINES = 4;

export function startMachineWorkload(o: { targets: () => Target[]; adminKey: string; timeoutMs: number }): MachineWorkload {
  const history: MachineOp[] = [];
  const alive: string[] = [];
  let next = 0;
  let turn = 0;
  let running = true;
  const call = async (op: MachineOp, method: string, route: string, body?: unknown): Promise<unknown> => {
    const target = pick(o.targets());
    op.worker = target.name;
    try {
      const res = await fetch(`${target.url}${route}`, {
        method, headers: { authorization: `Bearer ${o.adminKey}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(o.timeoutMs),
      });
      const text = await res.text();
      let parsed: unknown = null;
      try { parsed = JSON.parse(text); } catch { /* bytes */ }
      if (res.status >= 300) {
        op.outcome = 'error';
        op.code = (parsed as { error?: { code?: string } } | null)?.error?.code ?? `http ${res.status}`;
        return null;
      }
      return parsed;
    } catch (e) {
      op.outcome = (e as Error).name === 'TimeoutError' ? 'hung' : 'unreachable';
      return null;
    }
  };
  const one = async (): Promise<MachineOp> => {
    // In turn (each kind comes up within a few operations), on a random machine.
    let kind = ROTATION[turn++ % ROTATION.length];
    if (alive.length === 0 || (kind === 'm-create' && alive.length >= 2)) kind = alive.length === 0 ? 'm-create' : 'm-write';
    if (kind === 'm-fork' && alive.length >= MAX_MACHINES) kind = 'm-read';
    const op: MachineOp = { id: ++next, kind, worker: '', machine: kind === 'm-create' ? '' : pick(alive), start: Date.now(), end: 0, outcome: 'ok' };
    history.push(op);
    switch (kind) {
      case 'm-create': {
        const m = await call(op, 'POST', '/v1/machines', { memoryMb: 256, idleTimeoutMs: 600_000 }) as { id: string } | null;
        if (m) { op.machine = m.id; alive.push(m.id); }
        break;
      }
      case 'm-write': {
        op.value = randomBytes(4).toString('hex');
        const r = await call(op, 'POST', `/v1/machines/${op.machine}/exec`, { command: `echo ${op.value} >> /root/log && sync` }) as { exitCode: number } | null;
        if (r && r.exitCode !== 0) { op.outcome = 'error'; op.code = `exit ${r.exitCode}`; }
        break;
      }
      case 'm-fork': {
        const r = await call(op, 'POST', `/v1/machines/${op.machine}/fork`, { count: 1 }) as { machines: { id: string }[] } | null;
        if (r) { op.forks = r.machines.map((m) => m.id); alive.push(...op.forks); }
        break;
      }
      case 'm-hibernate':
        await call(op, 'POST', `/v1/machines/${op.machine}/hibernate`);
        break;
      case 'm-read': {
        const r = await call(op, 'POST', `/v1/machines/${op.machine}/exec`, { command: 'cat /root/log 2>/dev/null; true' }) as { stdout: string } | null;
        if (r) op.read = r.stdout;
        break;
      }
    }
    // A machine found lost (its worker died while it held memory) is left alone from then on.
    if ((op.code === 'failed_precondition' || op.code === 'not_found') && alive.includes(op.machine)) alive.splice(alive.indexOf(op.machine), 1);
    op.end = Date.now();
    return op;
  };
  const loop = (async () => {
    while (running) {
      const op = await one();
      if (op.outcome !== 'ok') await new Promise((r) => setTimeout(r, 250));
    }
  })();
  return { history, async stop() { running = false; await loop; } };
}

/** Watches this host's QEMU processes: which machines run under which worker's home, sampled every `everyMs`. */
export function watchQemu(homes: string[], everyMs = 250): { doubles: string[]; stop(): void } {
  const doubles: string[] = [];
  const timer = setInterval(() => {
    const where = new Map<string, Set<string>>();
    for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
      let cmd = '';
      try { cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8'); } catch { continue; }
      if (!cmd.includes('qemu-system')) continue;
      const home = homes.find((h) => cmd.includes(`${h}/`));
      const id = /\/machines\/run\/(m_[0-9a-z]+)/.exec(cmd)?.[1];
      if (!home || !id) continue;
      (where.get(id) ?? where.set(id, new Set()).get(id)!).add(home);
    }
    for (const [id, at] of where) if (at.size > 1) doubles.push(`machine ${id} ran under ${[...at].join(' and ')} at ${Date.now()}`);
  }, everyMs);
  return { doubles, stop: () => clearInterval(timer) };
}

/** What the machines' histories and final state say (lines as checker.ts's). */
export async function checkMachines(history: readonly MachineOp[], read: (route: string) => Promise<{ status: number; body: unknown }>, exec: (id: string, command: string) => Promise<{ status: number; body: unknown }>): Promise<{ lost: string[]; wrong: string[]; hung: string[]; untyped: string[]; outcomes: Record<string, number> }> {
  const v = { lost: [] as string[], wrong: [] as string[], hung: [] as string[], untyped: [] as string[], outcomes: {} as Record<string, number> };
  for (const op of history) {
    const key = `${op.kind} ${op.outcome === 'error' ? op.code : op.outcome}`;
    v.outcomes[key] = (v.outcomes[key] ?? 0) + 1;
    if (op.outcome === 'hung') v.hung.push(`${op.kind} #${op.id} of ${op.machine} on ${op.worker}`);
    if (op.outcome === 'error' && /^(internal|http 5(?!03))/.test(op.code ?? '')) v.untyped.push(`${op.kind} #${op.id} of ${op.machine} on ${op.worker}: ${op.code}`);
  }
  const sent = new Set(history.filter((op) => op.kind === 'm-write').map((op) => op.value!));
  // Each machine's acknowledged lines: its own, and for a fork its source's acknowledged before the fork began.
  const acked = new Map<string, string[]>();
  const ackedBefore = (machine: string, t: number): string[] => history.filter((op) => op.kind === 'm-write' && op.machine === machine && op.outcome === 'ok' && op.end <= t).map((op) => op.value!);
  for (const op of history) {
    if (op.kind === 'm-create' && op.outcome === 'ok') acked.set(op.machine, []);
    if (op.kind === 'm-fork' && op.outcome === 'ok') for (const f of op.forks ?? []) acked.set(f, [...(acked.get(op.machine) ?? []), ...ackedBefore(op.machine, op.start)]);
  }
  for (const [id, inherited] of acked) {
    const m = await read(`/v1/machines/${id}`);
    const state = (m.body as { state?: string } | null)?.state;
    if (m.status !== 200 || state === 'lost' || state === 'stopped') continue;
    const r = await exec(id, 'cat /root/log 2>/dev/null; true');
    if (r.status !== 200) {
      // Its worker lost it while this ran: no answer about its memory, and none needed.
      if ((r.body as { error?: { code?: string } } | null)?.error?.code === 'failed_precondition') continue;
      v.wrong.push(`machine ${id}: reading its log answered ${r.status}`);
      continue;
    }
    const lines = ((r.body as { stdout: string }).stdout).split('\n').filter(Boolean);
    for (const l of lines) if (!sent.has(l)) v.wrong.push(`machine ${id}: a line never written: ${l}`);
    const want = [...inherited, ...history.filter((op) => op.kind === 'm-write' && op.machine === id && op.outcome === 'ok').map((op) => op.value!)];
    let at = 0;
    for (const w of want) {
      const found = lines.indexOf(w, at);
      if (found < 0) v.lost.push(`machine ${id}: acknowledged line ${w} missing (or out of order)`);
      else at = found + 1;
    }
  }
  return v;
}

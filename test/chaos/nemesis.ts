import type { ChaosCluster, ChaosWorker } from './cluster.ts';

/**
 * The faults a chaos run injects, one at a time: each takes hold, lasts `holdMs` (or what its kind
 * needs), and is undone. A worker is picked at random among the running ones.
 */
export const FAULT_KINDS = ['kill', 'pause', 'partition-postgres', 'partition-s3', 'partition-peer', 'isolate', 'postgres-restart', 's3-restart', 'lossy', 'slow'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Fault {
  kind: FaultKind;
  /** What it struck: a worker's name, a pair, or `postgres` / `s3`. */
  target: string;
  startedAt: number;
  /** How long it was meant to hold (kill: the time down, at most 1 s; pause: at least ten heartbeats; restarts: at most 2 s). */
  holdMs: number;
  /** When it was undone (the worker restarted or resumed, the link healed, the server back). */
  undoneAt: number;
  /** From `undoneAt` until every worker served every context again (null: not within the probe's limit). */
  recoveryMs: number | null;
  /** `delay` or `rate` for a slow link (netem, or htb where the kernel lacks netem). */
  how?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)];

/** Injects one fault of `kind`, holds it, undoes it; returns it without its recovery (`recover` measures that). */
export async function inject(c: ChaosCluster, kind: FaultKind, holdMs: number): Promise<Fault> {
  const running = c.workers.filter((w) => w.alive());
  const w: ChaosWorker = pick(running);
  const other = pick(running.filter((x) => x !== w)) ?? w;
  // A pause outlasts the lease (three heartbeats) several times over: the others take its work over.
  const pauseMs = Math.max(holdMs, c.heartbeatMs * 10);
  const startedAt = Date.now();
  let target = w.name;
  let how: string | undefined;
  switch (kind) {
    case 'kill':
      await c.kill(w);
      await sleep(Math.min(holdMs, 1000));
      await c.restart(w);
      break;
    case 'pause':
      c.pause(w);
      await sleep(pauseMs);
      c.resume(w);
      break;
    case 'postgres-restart':
      target = 'postgres';
      await c.restartPostgres(Math.min(holdMs, 2000));
      break;
    case 's3-restart':
      target = 's3';
      await c.restartS3(Math.min(holdMs, 2000));
      break;
    default: {
      // The network's faults: made, held, healed.
      // A partition's other side: its node in the test network, and its name in the report.
      const side: Record<string, [string, string]> = { 'partition-postgres': ['pg', 'postgres'], 'partition-s3': ['s3', 's3'], 'partition-peer': [other.name, other.name] };
      if (kind in side) {
        c.net.partition(w.name, side[kind][0]);
        target = `${w.name}|${side[kind][1]}`;
      } else if (kind === 'isolate') c.net.isolate(w.name);
      else if (kind === 'lossy') c.net.lossy(w.name, 20);
      else how = c.net.slow(w.name, 200);
      await sleep(holdMs);
      c.net.heal();
    }
  }
  return { kind, target, startedAt, holdMs: Math.round(holdMs), undoneAt: Date.now(), recoveryMs: null, ...(how ? { how } : {}) };
}

/**
 * Waits until every worker serves every context (a read-only query through each worker's API
 * answers 200); returns how long that took, or null past `limitMs`.
 */
export async function recover(c: ChaosCluster, contexts: string[], from: number, limitMs: number): Promise<number | null> {
  const served = async (w: ChaosWorker, context: string) => {
    try {
      const r = await fetch(`${w.url}/v1/contexts/${context}/exec`, {
        method: 'POST', headers: { authorization: `Bearer ${c.adminKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ command: 'true', commit: 'never' }), signal: AbortSignal.timeout(5000),
      });
      await r.arrayBuffer();
      return r.status === 200;
    } catch {
      return false;
    }
  };
  while (Date.now() - from < limitMs) {
    const all = await Promise.all(c.workers.flatMap((w) => contexts.map((x) => served(w, x))));
    if (all.every(Boolean)) return Date.now() - from;
    await sleep(100);
  }
  return null;
}

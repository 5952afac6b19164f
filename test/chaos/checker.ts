import type { Op } from './workload.ts';

/**
 * Reads a chaos run's history (workload.ts) against the cluster's final state, once every fault is
 * undone. What it finds, each a list of one line per case:
 * - `lost`: an acknowledged write (query, files PUT, merge) whose version is not in its context's
 *   history from the head, or whose file is not in the head as written;
 * - `wrong`: a file with bytes no operation wrote, a read that came back with other bytes than an
 *   acknowledged write put there, a version that does not hold what its write wrote;
 * - `chains`: a context's history that is not one chain from its head (a version twice, a parent
 *   missing before the history's start);
 * - `forks`: an acknowledged fork missing or moved (nothing writes to forks);
 * - `double`: two runs of the service (workload.ts, SERVICE_APP) whose committed spans overlap: it
 *   ran on two workers at once and both runs' writes were accepted (a stale lease's among them);
 * - `stale`: a service run's commit under a lease epoch older than one committed before it in its
 *   context's history (`cause.lease`: epochs are drawn from one sequence, so a later holder's is
 *   greater): a stale holder's write was accepted;
 * - `quota`: more of the quota tenant's queries running at once than its quota;
 * - `hung`: a request not answered within the client's timeout;
 * - `untyped`: a failure that was not one of the typed errors a client can act on (500s);
 * - `crashed`: a worker that exited by itself (filled by the run, not here).
 */
export interface Verdict {
  lost: string[];
  wrong: string[];
  chains: string[];
  forks: string[];
  double: string[];
  stale: string[];
  quota: string[];
  hung: string[];
  untyped: string[];
  crashed: string[];
  /** The service's runs' commits seen with a lease (what `stale` judged). */
  leasedCommits: number;
  /** Outcomes by kind and code: `write ok`, `put unavailable`, … */
  outcomes: Record<string, number>;
}

/** Reads a route of the cluster (any live worker); 404 comes back as null. */
export type Reader = (route: string) => Promise<{ status: number; text: string; body: unknown }>;

export async function check(history: readonly Op[], read: Reader, contexts: string[], quota: number): Promise<Verdict> {
  const v: Verdict = { lost: [], wrong: [], chains: [], forks: [], double: [], stale: [], quota: [], hung: [], untyped: [], crashed: [], leasedCommits: 0, outcomes: {} };
  for (const op of history) {
    const key = `${op.kind} ${op.outcome === 'error' ? op.code : op.outcome}`;
    v.outcomes[key] = (v.outcomes[key] ?? 0) + 1;
    if (op.outcome === 'hung') v.hung.push(`${op.kind} #${op.id} on ${op.worker} at ${op.start}`);
    if (op.outcome === 'error' && /^(internal|http 5(?!03))/.test(op.code ?? '')) v.untyped.push(`${op.kind} #${op.id} on ${op.worker}: ${op.code}`);
    if (op.kind === 'read' && op.outcome === 'ok' && op.read !== op.value) v.wrong.push(`read #${op.id} of ${op.context}:${op.path} got ${JSON.stringify(op.read)}, not ${op.value}`);
  }

  for (const context of contexts) {
    const chain = await versionsOf(read, context);
    const ids = new Set<string>();
    for (let i = 0; i < chain.length; i++) {
      const { id, parent } = chain[i];
      if (ids.has(id)) v.chains.push(`${context}: ${id} twice`);
      ids.add(id);
      if (i + 1 < chain.length && parent !== chain[i + 1].id) v.chains.push(`${context}: ${id}'s parent is ${parent}, the list goes on with ${chain[i + 1].id}`);
    }
    const ops = history.filter((op) => op.context === context && (op.kind === 'write' || op.kind === 'put' || op.kind === 'merge' || op.kind === 'shared'));
    for (const op of ops) {
      const acked = op.outcome === 'ok';
      if (acked && op.version && !ids.has(op.version)) v.lost.push(`${op.kind} #${op.id}: version ${op.version} of ${context} is not in its history`);
      if (op.kind === 'shared') {
        if (!acked || !op.version) continue;
        const at = await read(`/v1/contexts/${context}/files${op.path}?version=${op.version}`);
        if (at.status !== 200 || at.text !== op.value) v.wrong.push(`shared #${op.id}: ${context}@${op.version} holds ${at.status === 200 ? JSON.stringify(at.text) : at.status}, not ${op.value}`);
        continue;
      }
      const got = await read(`/v1/contexts/${context}/files${op.path}`);
      if (got.status === 200 && got.text === op.value) continue;
      if (got.status === 200) v.wrong.push(`${op.kind} #${op.id}: ${context}:${op.path} holds ${JSON.stringify(got.text)}, not ${op.value}`);
      else if (got.status !== 404) v.wrong.push(`${op.kind} #${op.id}: reading ${context}:${op.path} answered ${got.status}`);
      else if (acked) v.lost.push(`${op.kind} #${op.id}: ${context}:${op.path} (acknowledged in ${op.version}) is not in the head`);
    }
  }

  for (const op of history) {
    if (op.kind !== 'fork' || op.outcome !== 'ok') continue;
    const got = await read(`/v1/contexts/${op.fork}`);
    const head = (got.body as { head?: string } | null)?.head;
    if (got.status !== 200 || head !== op.version) v.forks.push(`fork #${op.id} ${op.fork}: ${got.status === 200 ? `head ${head}, acknowledged ${op.version}` : `answered ${got.status}`}`);
  }

  v.double.push(...(await doubleRuns(read)));
  const svc = await versionsOf(read, 'svc').catch(() => []);
  v.leasedCommits = svc.filter((x) => x.cause?.kind === 'service' && x.cause.lease).length;
  v.stale.push(...staleLeases(svc));

  // The quota tenant's queries, by when their commands ran: never more than `quota` at once.
  const edges = history.filter((op) => op.ran).flatMap((op) => [[op.ran![0], 1, op.id], [op.ran![1], -1, op.id]] as [bigint, number, number][]);
  edges.sort((a, b) => (a[0] === b[0] ? a[1] - b[1] : a[0] < b[0] ? -1 : 1));
  let running = 0;
  for (const [at, d, id] of edges) {
    running += d;
    if (running > quota) v.quota.push(`${running} queries of the quota tenant ran at once (#${id} started at ${at})`);
  }
  return v;
}

/** The service's runs (files of beats under /root/runs in its context's head) whose spans overlap. */
async function doubleRuns(read: Reader): Promise<string[]> {
  const dir = await read('/v1/contexts/svc/files/root/runs');
  if (dir.status === 404) return [];
  const spans: [bigint, bigint, string][] = [];
  for (const { name } of (dir.body as { entries: { name: string }[] }).entries) {
    const beats = (await read(`/v1/contexts/svc/files/root/runs/${name}`)).text.split('\n').filter(Boolean).map(BigInt);
    if (beats.length) spans.push([beats.reduce((a, b) => (b < a ? b : a)), beats.reduce((a, b) => (b > a ? b : a)), name]);
  }
  spans.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: string[] = [];
  for (let i = 1; i < spans.length; i++) {
    const [start, , name] = spans[i];
    const before = spans.slice(0, i).filter(([, end]) => end > start);
    for (const [, end, other] of before) out.push(`service runs ${other} and ${name} overlap by ${(end - start) / 1_000_000n} ms`);
  }
  return out;
}

/** Service runs' versions (oldest first) whose lease epoch is below one committed before them. */
function staleLeases(newestFirst: { id: string; cause?: { kind: string; lease?: { worker: string; epoch: number } } }[]): string[] {
  const out: string[] = [];
  let highest: { epoch: number; id: string } | null = null;
  for (const v of [...newestFirst].reverse()) {
    const lease = v.cause?.kind === 'service' ? v.cause.lease : undefined;
    if (!lease) continue;
    if (highest && lease.epoch < highest.epoch) out.push(`${v.id} was committed under epoch ${lease.epoch} (${lease.worker}) after ${highest.id} under epoch ${highest.epoch}`);
    if (!highest || lease.epoch > highest.epoch) highest = { epoch: lease.epoch, id: v.id };
  }
  return out;
}

/** A context's versions from its head, following `before` pages. */
interface VersionSeen { id: string; parent: string | null; cause?: { kind: string; lease?: { worker: string; epoch: number } } }

async function versionsOf(read: Reader, context: string): Promise<VersionSeen[]> {
  const out: VersionSeen[] = [];
  let before = '';
  for (;;) {
    const r = await read(`/v1/contexts/${context}/versions?limit=500${before ? `&before=${before}` : ''}`);
    if (r.status !== 200) throw new Error(`reading ${context}'s versions answered ${r.status}: ${r.text}`);
    const page = (r.body as { versions: VersionSeen[] }).versions;
    out.push(...page);
    if (page.length < 500 || page.at(-1)!.parent === null) return out;
    before = page.at(-1)!.id;
  }
}

/** The verdict's violations in one count (what a run must keep at 0). */
export function violations(v: Verdict): number {
  return v.lost.length + v.wrong.length + v.chains.length + v.forks.length + v.double.length + v.stale.length + v.quota.length + v.hung.length + v.untyped.length + v.crashed.length;
}

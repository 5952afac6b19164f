import type { Version } from '@shellbase/protocol';

/** One context's loaded history, newest first (its head first). */
export interface Chain { name: string; versions: Version[] }

export interface GraphRow {
  v: Version;
  lane: number;
  /** Contexts whose head this version is. */
  heads: string[];
}

export interface GraphEdge {
  /** Row indexes: the child (newer) and its parent (older). */
  from: number;
  to: number;
  fromLane: number;
  toLane: number;
  /** `merge`: from a merge version to the source's version it merged (the version's `merged`). */
  kind: 'parent' | 'merge';
}

export interface Graph {
  rows: GraphRow[];
  edges: GraphEdge[];
  /** Lane names: lane 0 is the context shown; others are related contexts with versions of their own. */
  lanes: string[];
  /** The oldest row continues below (more of lane 0's history can be loaded). */
  more: boolean;
}

/**
 * Lays out the context's history (chains[0]) with related contexts' (forks, the context it was
 * forked from, merge sources) as lanes: each version sits in the lane of the first chain that
 * holds it, parents are edges, merges are edges to the version they merged (`merged`, when loaded).
 * `complete`: chains[0] reaches where its history starts (no older page to load).
 */
export function layout(chains: Chain[], complete: boolean): Graph {
  const own = chains[0];
  if (!own) return { rows: [], edges: [], lanes: [], more: false };
  const laneOf = new Map<string, number>();
  const byId = new Map<string, Version>();
  const rank = new Map<string, number>();
  const lanes: string[] = [];
  const heads = new Map<string, string[]>();
  const oldestOwn = own.versions.at(-1)?.createdAt ?? '';
  chains.forEach((chain, ci) => {
    const head = chain.versions[0];
    if (head) heads.set(head.id, [...(heads.get(head.id) ?? []), chain.name]);
    let lane = -1;
    chain.versions.forEach((v, i) => {
      if (laneOf.has(v.id)) return;
      // Other lanes show only what falls within the loaded stretch of the context's own history.
      if (ci > 0 && !complete && v.createdAt < oldestOwn) return;
      if (lane < 0) { lane = lanes.length; lanes.push(chain.name); }
      laneOf.set(v.id, lane);
      byId.set(v.id, v);
      rank.set(v.id, i);
    });
  });
  const rows: GraphRow[] = [...byId.values()]
    .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || (rank.get(a.id)! - rank.get(b.id)!))
    .map((v) => ({ v, lane: laneOf.get(v.id)!, heads: heads.get(v.id) ?? [] }));
  const index = new Map(rows.map((r, i) => [r.v.id, i]));
  const edges: GraphEdge[] = [];
  rows.forEach((r, i) => {
    const p = r.v.parent === null ? undefined : index.get(r.v.parent);
    if (p !== undefined) edges.push({ from: i, to: p, fromLane: r.lane, toLane: rows[p]!.lane, kind: 'parent' });
    const si = r.v.merged === undefined ? undefined : index.get(r.v.merged);
    if (si !== undefined) edges.push({ from: i, to: si, fromLane: r.lane, toLane: rows[si]!.lane, kind: 'merge' });
  });
  const last = own.versions.at(-1);
  return { rows, edges, lanes, more: !complete && last !== undefined && last.parent !== null };
}

/** The context a merge version came from (its cause reads `merge NAME`): which context to load as a lane. */
export function mergeSource(v: Version): string | undefined {
  if (v.cause.kind !== 'merge' || !v.cause.command) return undefined;
  const m = /^merge (\S+)$/.exec(v.cause.command);
  return m?.[1];
}

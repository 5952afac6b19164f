import type { Change } from '../store/snapshotter/types.js';
import type { MetadataStore, VersionRow } from '../store/metadata/types.js';
import { unionChanges } from './overlap.js';

export interface Divergence {
  /** The latest common ancestor. */
  ancestor: VersionRow;
  /** Paths changed from the ancestor to `a`, and to `b`. */
  a: Change[];
  b: Change[];
}

const FROM_A = 1;
const FROM_B = 2;
const COMMON = FROM_A | FROM_B;

/**
 * How versions `a` and `b` diverged from their latest common ancestor.
 *
 * Versions form a graph: a merge has a second parent. The walk visits
 * versions deepest first (a version is always deeper than its parents), so a
 * version's marks (reached from a, from b, or both) are final when it is
 * visited; it stops once only common ancestors are left. Each side's paths are
 * the change sets of the versions only it reaches. A merge version adds none
 * of its own: its content is its two parents', and both are walked.
 * Null when they share no ancestor (different images) or a change set on the
 * way is unknown, which callers treat as "everything differs".
 */
export async function diverge(md: MetadataStore, a: VersionRow, b: VersionRow): Promise<Divergence | null> {
  if (a.id === b.id) return { ancestor: a, a: [], b: [] };
  const marks = new Map<string, number>([[a.id, FROM_A], [b.id, FROM_B]]);
  const queue = new Map<string, VersionRow>([[a.id, a], [b.id, b]]);
  const only: [VersionRow[], VersionRow[]] = [[], []];
  let ancestor: VersionRow | null = null;
  while (queue.size > 0) {
    const uncommon = [...queue.keys()].filter((id) => marks.get(id) !== COMMON);
    let next: VersionRow | null = null;
    for (const v of queue.values()) if (!next || v.depth > next.depth) next = v;
    if (uncommon.length === 0) { ancestor ??= next; break; }
    const v = next!;
    queue.delete(v.id);
    const mark = marks.get(v.id)!;
    if (mark === COMMON) { ancestor ??= v; } else only[mark - 1].push(v);
    for (const pid of [v.parent, v.merged]) {
      if (!pid) continue;
      marks.set(pid, (marks.get(pid) ?? 0) | mark);
      if (!queue.has(pid)) {
        const parent = await md.versions.get(pid);
        if (parent) queue.set(pid, parent);
      }
    }
  }
  if (!ancestor) return null;
  const sides: Change[][][] = [[], []];
  for (const side of [0, 1] as const) {
    for (const v of only[side]) {
      if (v.merged) continue;
      if (v.parent === null) return null;
      const changes = await md.versions.changes(v.id);
      if (changes === null) return null;
      sides[side].push(changes);
    }
  }
  return { ancestor, a: unionChanges(sides[0]), b: unionChanges(sides[1]) };
}

/** The paths on which versions `a` and `b` may differ (null: everything may). */
export async function changesBetween(md: MetadataStore, a: VersionRow, b: VersionRow): Promise<Change[] | null> {
  const d = await diverge(md, a, b);
  return d && unionChanges([d.a, d.b]);
}

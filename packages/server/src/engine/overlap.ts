import type { Change, ChangeType } from '../store/snapshotter/types.js';

/**
 * Whether two sets of changes (made over a common ancestor) can be stacked in
 * either order with the same result. They overlap when both touch the same
 * path, unless both merely hold a plain directory there (a directory that
 * only gained or lost entries); and when one replaces or removes a path (a
 * file, symlink, whiteout or opaque directory) that the other changes
 * anything beneath.
 */
export function overlappingPaths(ours: readonly Change[], theirs: readonly Change[]): string[] {
  if (ours.length === 0 || theirs.length === 0) return [];
  const theirType = new Map<string, ChangeType>(theirs);
  const theirSorted = [...theirType.keys()].sort();
  const found = new Set<string>();
  for (const [p, t] of ours) {
    const other = theirType.get(p);
    if (other !== undefined && !(t === 'd' && other === 'd')) found.add(p);
    // A path of theirs above ours that replaced the whole subtree.
    for (let a = parentOf(p); a !== null; a = parentOf(a)) {
      const at = theirType.get(a);
      if (at !== undefined && at !== 'd') { found.add(p); break; }
    }
    // Ours replaced a subtree in which they changed something.
    if (t !== 'd' && hasDescendant(theirSorted, p)) found.add(p);
  }
  return [...found].sort();
}

function parentOf(p: string): string | null {
  const i = p.lastIndexOf('/');
  return i <= 0 ? null : p.slice(0, i);
}

function hasDescendant(sorted: readonly string[], p: string): boolean {
  const prefix = p + '/';
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] < prefix) lo = mid + 1; else hi = mid;
  }
  return lo < sorted.length && sorted[lo].startsWith(prefix);
}

/** Union of change sets: later sets win for a path (used to combine versions along a lineage). */
export function unionChanges(sets: Iterable<readonly Change[]>): Change[] {
  const m = new Map<string, ChangeType>();
  for (const set of sets) for (const [p, t] of set) {
    const prev = m.get(p);
    m.set(p, prev !== undefined && prev !== 'd' && t === 'd' ? prev : t);
  }
  return [...m.entries()];
}

import type { Change } from '../store/layers/types.js';
import type { MetadataStore, VersionRow } from '../store/metadata/types.js';
import { unionChanges } from './overlap.js';

/**
 * The paths on which versions `a` and `b` may differ: everything changed
 * from their latest common ancestor to either. Null when they share no
 * ancestor (different images) or a change set along the way is unknown,
 * which callers treat as "everything differs".
 */
export async function changesBetween(md: MetadataStore, a: VersionRow, b: VersionRow): Promise<Change[] | null> {
  const sets: Change[][] = [];
  let x: VersionRow | null = a;
  let y: VersionRow | null = b;
  while (x && y && x.id !== y.id) {
    const step: VersionRow = x.depth >= y.depth ? x : y;
    if (step.changes === null || step.parent === null) return null;
    sets.push(step.changes);
    const parent = await md.getVersion(step.parent);
    if (step === x) x = parent; else y = parent;
  }
  if (!x || !y) return null;
  return unionChanges(sets);
}

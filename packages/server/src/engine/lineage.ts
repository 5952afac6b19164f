import type { Change } from '../store/layers/types.js';
import type { MetadataStore, VersionRow } from '../store/metadata/types.js';
import { unionChanges } from './overlap.js';

export interface Divergence {
  /** The latest common ancestor. */
  ancestor: VersionRow;
  /** Paths changed from the ancestor to `a`, and to `b`. */
  a: Change[];
  b: Change[];
}

/**
 * How versions `a` and `b` diverged from their latest common ancestor. Null
 * when they share none (different images) or a change set on the way is
 * unknown, which callers treat as "everything differs".
 */
export async function diverge(md: MetadataStore, a: VersionRow, b: VersionRow): Promise<Divergence | null> {
  const sets: [Change[][], Change[][]] = [[], []];
  let x: VersionRow | null = a;
  let y: VersionRow | null = b;
  while (x && y && x.id !== y.id) {
    const side = x.depth >= y.depth ? 0 : 1;
    const step: VersionRow = side === 0 ? x : y;
    if (step.parent === null) return null;
    const changes = await md.versionChanges(step.id);
    if (changes === null) return null;
    sets[side].push(changes);
    const parent = await md.getVersion(step.parent);
    if (side === 0) x = parent; else y = parent;
  }
  if (!x || !y) return null;
  return { ancestor: x, a: unionChanges(sets[0]), b: unionChanges(sets[1]) };
}

/** The paths on which versions `a` and `b` may differ (null: everything may). */
export async function changesBetween(md: MetadataStore, a: VersionRow, b: VersionRow): Promise<Change[] | null> {
  const d = await diverge(md, a, b);
  return d && unionChanges([d.a, d.b]);
}

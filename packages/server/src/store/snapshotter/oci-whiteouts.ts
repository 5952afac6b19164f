import type { Change } from './types.js';

/** OCI's spelling of a deletion (`.wh.NAME`) and of an opaque directory (`.wh..wh..opq` inside it). */
const WHITEOUT = '.wh.';
const OPAQUE = '.wh..wh..opq';

/** What turning an unpacked OCI layer into the store's form takes (relative paths, no leading slash). */
export interface WhiteoutPlan {
  /** The `.wh.` entries themselves, to delete. */
  remove: string[];
  /** Paths to make whiteouts (character devices 0/0). */
  whiteouts: string[];
  /** Directories to mark opaque ('' is the layer's root). */
  opaque: string[];
}

/**
 * The plan for a layer's entries (a scan's changes, absolute inside the layer).
 * A whiteout of a path the layer itself holds hides nothing of it (OCI: a
 * whiteout applies to lower layers only), so it is only removed; names that
 * would leave the directory (`.wh..`, `.wh...`) are dropped.
 */
export function planWhiteouts(changes: readonly Change[]): WhiteoutPlan {
  const plan: WhiteoutPlan = { remove: [], whiteouts: [], opaque: [] };
  const present = new Set(changes.map(([p]) => p));
  for (const [abs] of changes) {
    const slash = abs.lastIndexOf('/');
    const name = abs.slice(slash + 1);
    if (!name.startsWith(WHITEOUT)) continue;
    // Below a `.wh.` directory (nonsense, but possible) everything goes with it.
    if (plan.remove.some((r) => abs.startsWith(`/${r}/`))) continue;
    const dir = abs.slice(1, slash);
    plan.remove.push(abs.slice(1));
    if (name === OPAQUE) { plan.opaque.push(dir); continue; }
    const target = name.slice(WHITEOUT.length);
    if (target === '' || target === '.' || target === '..') continue;
    const rel = dir ? `${dir}/${target}` : target;
    if (!present.has(`/${rel}`)) plan.whiteouts.push(rel);
  }
  return plan;
}

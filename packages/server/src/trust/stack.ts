import type { LayerReader, LayerStat } from '../store/snapshotter/types.js';

/**
 * What a stack of layers (top first) shows at a path, as overlayfs would: the entry and the layer
 * it is in; `absent` when the stack has nothing there; `blocked` when something on the way is not
 * a directory (a link, a file), which hides everything below it. Each layer is looked at from its
 * root down, one name at a time, so no link in a layer is ever followed on the host.
 */
export type StackEntry = { reader: LayerReader; stat: LayerStat } | 'absent' | 'blocked';

export function lookup(readers: readonly LayerReader[], rel: string): StackEntry {
  const parts = rel.split('/');
  for (const r of readers) {
    let opaqueAbove = false;
    for (let i = 1; i <= parts.length; i++) {
      const at = parts.slice(0, i).join('/');
      const s = r.stat(at);
      if (!s) {
        if (opaqueAbove) return 'absent'; // nothing below an opaque directory comes from lower layers
        break; // this layer has nothing on the way: the layers below decide
      }
      if (s.kind === 'whiteout') return 'absent';
      if (i === parts.length) return { reader: r, stat: s };
      if (s.kind !== 'dir') return 'blocked';
      if (r.opaque.has(at)) opaqueAbove = true;
    }
  }
  return 'absent';
}

/** Whether the overlay may have a directory at `rel`: the stack has one there, or nothing on the way. */
export function directoryUsable(readers: readonly LayerReader[], rel: string): boolean {
  const e = lookup(readers, rel);
  return e === 'absent' || (e !== 'blocked' && e.stat.kind === 'dir');
}

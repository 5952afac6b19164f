import { ShellbaseError } from '../../errors.js';
import type { Change, CommittedLayer, ScratchWriter, Snapshotter } from '../../store/snapshotter/types.js';
import { parsePath } from '../files/paths.js';
import type { Entry, VersionView } from '../files/view.js';
import { ancestorsOf, attrsOf, makeParents, under } from '../files/writer.js';

/** The layers of `version` above `ancestor`, when the first is a plain extension of the second. */
export function layersAbove(version: readonly string[], ancestor: readonly string[]): string[] | null {
  if (ancestor.length > version.length) return null;
  for (let i = 0; i < ancestor.length; i++) if (version[i] !== ancestor[i]) return null;
  return version.slice(ancestor.length);
}

export function mergeConflict(paths: string[]): ShellbaseError {
  return new ShellbaseError('conflict', `the merge overlaps changes on both sides at ${paths.length} path(s)`, {
    details: { paths }, hint: 'resolve the listed paths on one side (or reset), then merge again',
  });
}

/**
 * Builds one layer holding the source's side of a merge (`theirs`, the paths
 * it changed since the common ancestor) as the source's view shows them:
 * used when the source's layers are not a plain extension of the ancestor's
 * (a squash rewrote them).
 */
export async function materialize(layers: Snapshotter, theirs: readonly Change[], source: VersionView): Promise<CommittedLayer | null> {
  const scratch = await layers.prepare({ diskMb: 1 << 20 });
  const w = layers.writer(scratch);
  try {
    const done = new Set<string>();
    for (const [p, type] of [...theirs].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
      if ([...done].some((d) => p.startsWith(`${d}/`))) continue;
      const segments = parsePath(p);
      const ancestors = ancestorsOf(source, segments.slice(0, -1));
      if (!ancestors) continue; // gone with a deleted parent, whose own entry covers it
      const target = under(makeParents(w, { ancestors, missing: [], name: '' }), segments[segments.length - 1]);
      const e = source.resolve(segments, false);
      if (!e) { await w.whiteout(target); done.add(p); continue; }
      // A plain directory only carries its own attributes (its changed entries come one by one);
      // an opaque one replaced everything below it, so all of it is copied.
      await copyEntry(w, e, target, source, type === 'O');
      if (e.type === 'dir' && type === 'O') {
        await w.setOpaque(target);
        done.add(p);
      }
    }
    return await layers.commit(scratch);
  } catch (e) {
    await layers.discard(scratch);
    throw e;
  }
}

async function copyEntry(w: ScratchWriter, e: Entry, target: string, view: VersionView, recursive: boolean): Promise<void> {
  switch (e.type) {
    case 'file': {
      const { reader, rel } = view.source(e);
      await w.copyFile(reader, rel, target);
      return;
    }
    case 'symlink': w.symlink(target, view.readlink(e), attrsOf(e)); return;
    case 'dir':
      w.mkdir(target, attrsOf(e));
      if (recursive) {
        for (const child of view.list(e)) await copyEntry(w, child, under(target, child.segments[child.segments.length - 1]), view, true);
        w.mkdir(target, attrsOf(e)); // its times again: its entries changed them
      }
      return;
    default: return; // device nodes and fifos are not carried by a merge
  }
}

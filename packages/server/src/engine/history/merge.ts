import { constants, copyFileSync, chmodSync, lchownSync, lutimesSync, mkdirSync, readlinkSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { ShellbaseError } from '../../errors.js';
import type { Change } from '../../store/layers/types.js';
import type { LayerStore, CommittedLayer } from '../../store/layers/types.js';
import { runOk } from '../../util/proc.js';
import { parsePath } from '../files/paths.js';
import type { Entry, VersionView } from '../files/view.js';
import { ancestorsOf, makeParents } from '../files/writer.js';

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
export async function materialize(layers: LayerStore, theirs: readonly Change[], source: VersionView): Promise<CommittedLayer | null> {
  const scratch = await layers.prepare({ diskMb: 1 << 20 });
  const tree = layers.scratchTree(scratch);
  try {
    const done = new Set<string>();
    for (const [p, type] of [...theirs].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
      if ([...done].some((d) => p.startsWith(`${d}/`))) continue;
      const segments = parsePath(p);
      const parentSegments = segments.slice(0, -1);
      const ancestors = ancestorsOf(source, parentSegments);
      if (!ancestors) continue; // gone with a deleted parent, whose own entry covers it
      const parent = makeParents(tree, { ancestors, missing: [], name: '' });
      const target = path.join(parent, segments[segments.length - 1]);
      const e = source.resolve(segments, false);
      if (!e) { await runOk('mknod', [target, 'c', '0', '0']); done.add(p); continue; }
      // A plain directory only carries its own attributes (its changed entries come one by one);
      // an opaque one replaced everything below it, so all of it is copied.
      await copyEntry(e, target, source, type === 'O');
      if (e.type === 'dir' && type === 'O') {
        await runOk('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', target]);
        done.add(p);
      }
    }
    return await layers.commit(scratch);
  } catch (e) {
    await layers.discard(scratch);
    throw e;
  }
}

async function copyEntry(e: Entry, target: string, view: VersionView, recursive: boolean): Promise<void> {
  switch (e.type) {
    case 'file': copyFileSync(e.hostPath, target, constants.COPYFILE_FICLONE); break;
    case 'symlink': symlinkSync(readlinkSync(e.hostPath), target); break;
    case 'dir':
      mkdirSync(target, { recursive: true });
      if (recursive) {
        for (const child of view.list(e)) await copyEntry(child, path.join(target, child.segments[child.segments.length - 1]), view, true);
      }
      break;
    default: return; // device nodes and fifos are not carried by a merge
  }
  lchownSync(target, e.stat.uid, e.stat.gid);
  if (e.type !== 'symlink') chmodSync(target, e.stat.mode & 0o7777);
  lutimesSync(target, e.stat.atime, e.stat.mtime);
}

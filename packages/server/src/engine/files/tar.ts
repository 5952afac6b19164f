import { chmodSync, lchownSync, lstatSync, lutimesSync, mkdirSync, renameSync } from 'node:fs';
import path from 'node:path';
import { scanLayer } from '../../store/layers/scan.js';
import { ancestorsOf, makeParents, place } from './writer.js';
import type { VersionView } from './view.js';

/**
 * Moves what was unpacked into the layer tree below `dir` (segments), each
 * entry placed as a write of that path would be: through symlinked parents of
 * the version, keeping the attributes of directories that exist there.
 */
export async function moveIntoLayer(staging: string, tree: string, view: VersionView, dir: readonly string[]): Promise<void> {
  const { changes } = await scanLayer(staging);
  const dirs: [string, string][] = [];
  for (const [rel, type] of changes) {
    const segments = [...dir, ...rel.slice(1).split('/')];
    if (type === 'd') {
      // A directory the version has (maybe behind a symlink, as /bin) keeps its own attributes.
      const existing = view.find(segments);
      if (existing?.type === 'dir') {
        makeParents(tree, { ancestors: ancestorsOf(view, existing.segments)!, missing: [], name: '' });
        continue;
      }
    }
    // Below a directory made in this layer the view knows nothing: place by the nearest existing parent.
    const p = place(view, segments);
    const target = path.join(makeParents(tree, p), p.name);
    const source = path.join(staging, rel);
    if (type === 'd') {
      mkdirSync(target, { recursive: true });
      dirs.push([source, target]);
    } else {
      renameSync(source, target);
    }
  }
  // Directory attributes last (children changed their times), deepest first.
  for (const [source, target] of dirs.reverse()) {
    const st = lstatSync(source);
    lchownSync(target, st.uid, st.gid);
    chmodSync(target, st.mode & 0o7777);
    lutimesSync(target, st.atime, st.mtime);
  }
}

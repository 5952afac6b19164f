import type { ScratchWriter } from '../../store/snapshotter/types.js';
import { ancestorsOf, makeParents, place, under } from './writer.js';
import type { VersionView } from './view.js';

/**
 * Moves what the runtime unpacked into the writer's staging directory into
 * its layer below `dir` (segments), each entry placed as a write of that path
 * would be: through symlinked parents of the version, keeping the attributes
 * of directories that exist there.
 */
export async function moveIntoLayer(w: ScratchWriter, view: VersionView, dir: readonly string[]): Promise<void> {
  const changes = await w.stagedChanges();
  const dirs: [string, string][] = [];
  for (const [rel, type] of changes) {
    const segments = [...dir, ...rel.slice(1).split('/')];
    if (type === 'd') {
      // A directory the version has (maybe behind a symlink, as /bin) keeps its own attributes.
      const existing = view.find(segments);
      if (existing?.type === 'dir') {
        makeParents(w, { ancestors: ancestorsOf(view, existing.segments)!, missing: [], name: '' });
        continue;
      }
    }
    // Below a directory made in this layer the view knows nothing: place by the nearest existing parent.
    const p = place(view, segments);
    const target = under(makeParents(w, p), p.name);
    if (type === 'd') {
      const st = w.stagedStat(rel.slice(1));
      w.mkdir(target, { mode: st.mode, uid: st.uid, gid: st.gid });
      dirs.push([rel.slice(1), target]);
    } else {
      w.adopt(rel.slice(1), target);
    }
  }
  // Directory times last (children changed them), deepest first.
  for (const [source, target] of dirs.reverse()) {
    const st = w.stagedStat(source);
    w.mkdir(target, { mode: st.mode, uid: st.uid, gid: st.gid, atimeMs: st.atimeMs, mtimeMs: st.mtimeMs });
  }
}

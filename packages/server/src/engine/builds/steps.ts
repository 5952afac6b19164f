import { Readable } from 'node:stream';
import type { VersionCause } from '@shellbase/protocol';
import { ShellbaseError } from '../../errors.js';
import type { Deps } from '../../core/deps.js';
import type { CommittedLayer, ScratchWriter } from '../../store/snapshotter/types.js';
import type { NewVersion, VersionRow } from '../../store/metadata/types.js';
import { newId } from '../../util/ids.js';
import type { VersionView } from '../files/view.js';
import { makeParents, place, under } from '../files/writer.js';
import { hostIds, type CopyEntry } from './sources.js';

/**
 * Writes COPY's (and WORKDIR's) entries into a layer over `view`:
 * directories the version has keep their owner and mode (as Docker's COPY
 * leaves them); new ones get the entry's. Directory attributes are set again
 * last, deepest first (writing below a directory changes its times).
 */
export async function writeEntries(w: ScratchWriter, view: VersionView, entries: CopyEntry[]): Promise<void> {
  const dirs: [string, CopyEntry][] = [];
  try {
    for (const e of entries) {
      const attrs = { mode: e.mode, ...hostIds(e) };
      if (e.type === 'dir' && view.find(e.segments)?.type === 'dir') continue;
      const p = place(view, e.segments);
      const target = under(makeParents(w, p), p.name);
      if (e.type === 'dir') { w.mkdir(target, attrs); dirs.push([target, e]); }
      else if (e.type === 'symlink') w.symlink(target, e.linkname!, attrs);
      else await w.writeFile(target, Readable.from([e.data!]), attrs);
    }
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EDQUOT' || code === 'ENOSPC') throw new ShellbaseError('payload_too_large', 'the copy is larger than the disk limit', { hint: 'copy less at once' });
    throw e;
  }
  for (const [target, e] of dirs.reverse()) w.mkdir(target, { mode: e.mode, ...hostIds(e) });
}

/** Builds one layer over `base` with `fill`; null when it changed nothing. */
export async function fillLayer(deps: Deps, base: VersionView, diskMb: number, fill: (w: ScratchWriter, view: VersionView) => Promise<void>): Promise<CommittedLayer | null> {
  const { snapshotter: layers } = deps;
  const scratch = await layers.prepare({ diskMb });
  try {
    await fill(layers.writer(scratch), base);
    return await layers.commit(scratch);
  } catch (e) {
    await layers.discard(scratch);
    throw e;
  }
}

/**
 * Records a step's layer as a version over `base` that no head points at yet
 * (the build moves the context's head once every step is done), durably.
 */
export async function recordStep(deps: Deps, tenantId: string, context: string, base: VersionRow, layer: CommittedLayer, cause: VersionCause): Promise<VersionRow> {
  const createdAt = new Date().toISOString();
  const version: NewVersion = {
    id: newId('v'), tenantId, parent: base.id, context, depth: base.depth + 1, layers: [...base.layers, layer.layerId],
    changes: layer.changes, cause, bytes: layer.bytes, createdAt,
  };
  await deps.durability.layers();
  await deps.metadata.versions.commit({ version, layer: { id: layer.layerId, kind: 'exec', bytes: layer.bytes, createdAt } });
  await deps.durability.metadata();
  return (await deps.metadata.versions.get(version.id))!;
}

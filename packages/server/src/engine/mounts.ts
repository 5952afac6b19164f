import type { ExecResult, MountResult, VersionCause } from '@shellbase/protocol';
import { type MountAsked } from '../core/mounts.js';
import { invalid } from '../errors.js';
import type { SandboxVolume } from '../runtime/types.js';
import type { CommittedLayer, Scratch, Snapshotter } from '../store/snapshotter/types.js';
import type { VersionRow } from '../store/metadata/types.js';
import type { CommitOutcome, CommitPart } from './commit.js';
import type { VersionView } from './files/view.js';

/**
 * Mounts: other contexts of the tenant shown to a query at a path (a volume is a context). A
 * read-only mount shows one version of its context; a writable one gives its writes a scratch of
 * their own, which commits into the mounted context together with the query's own commit
 * (Committer.commitTogether): both heads move or neither does, each by its own optimistic
 * concurrency. Every version the query commits names the version of each mount it saw.
 */

/** A mount ready for its sandbox: the version it shows, and (writable) the scratch its writes go to. */
export interface Mounted extends MountAsked {
  base: VersionRow;
  scratch: Scratch | null;
}

/**
 * Every mount point is reached through directories of the query's tree (or paths it lacks): a
 * symlink or file on the way is refused here, as the runtime would refuse it. A mount point the
 * tree lacks comes from a directory stacked below every layer (runtime/bwrap/volumes.ts), so no
 * layer may hide it: a whiteout, a file or an opaque directory at any of its parents refuses it.
 */
export function checkMountPoints(view: VersionView, own: string, mounts: readonly MountAsked[]): void {
  for (const m of mounts) {
    const segs = m.path.split('/').slice(1);
    let at = view.resolve([]);
    let whole = true;
    for (const seg of segs) {
      const next = at && view.child(at, seg);
      if (!next) { whole = false; break; }
      if (next.type !== 'dir') {
        const where = `/${next.segments.join('/')}`;
        throw invalid(`mount path ${m.path} runs through ${where}, a ${next.type} in ${own}`, 'mount at a path whose parents are directories (or absent) in the context', { path: m.path, at: where });
      }
      at = next;
    }
    if (whole) continue;
    for (let i = 1; i <= segs.length; i++) {
      const rel = segs.slice(0, i).join('/');
      for (const layer of view.layers) {
        const st = layer.stat(rel);
        if (st && (st.kind !== 'dir' || layer.opaque.has(rel))) {
          throw invalid(`mount path ${m.path} is hidden in ${own} (/${rel} was deleted or replaced there)`, `make the directory ${m.path} in the context first (mkdir -p)`, { path: m.path, at: `/${rel}` });
        }
      }
    }
  }
}

/** The runtime's volumes of the mounts (a read-only one's layers described over `scratch`, whose upper it does not use). */
export async function volumesOf(layers: Snapshotter, mounted: readonly Mounted[], scratch: Scratch): Promise<SandboxVolume[]> {
  return Promise.all(mounted.map(async (m) => ({ target: m.path, readOnly: m.readOnly, mount: await layers.mounts(m.base.layers, m.scratch ?? scratch) })));
}

/**
 * The mounts ready for a sandbox: each shows its version in `bases` (made mountable: `mountable`,
 * the squasher's), a writable one with a scratch of `diskMb`. Nothing is left behind on failure.
 */
export async function prepareMounts(layers: Snapshotter, asked: readonly MountAsked[], bases: readonly VersionRow[], diskMb: number,
  mountable: (v: VersionRow) => Promise<VersionRow>): Promise<Mounted[]> {
  const mounted: Mounted[] = [];
  try {
    for (const [i, m] of asked.entries()) {
      const seen = await mountable(bases[i]);
      // A worker that lacks the layers fetches them while the rest is made (`mounts` waits for them).
      layers.ensure?.(seen.layers).catch(() => undefined);
      mounted.push({ ...m, base: seen, scratch: m.readOnly ? null : await layers.prepare({ diskMb }) });
    }
  } catch (e) {
    await discardMounts(layers, mounted);
    throw e;
  }
  return mounted;
}

/**
 * After the sandbox: each writable mount's writes as a layer when `keep` (null: read-only, or
 * nothing written), else dropped; the bytes they held, and the first failure to keep them.
 */
export async function collectMounts(layers: Snapshotter, mounted: readonly Mounted[], keep: boolean): Promise<{ written: (CommittedLayer | null)[]; bytes: number; refused?: unknown }> {
  const written: (CommittedLayer | null)[] = [];
  let bytes = 0;
  let refused: unknown;
  for (const m of mounted) {
    if (!m.scratch) { written.push(null); continue; }
    try {
      if (keep) { const l = await layers.commit(m.scratch); bytes += l?.bytes ?? 0; written.push(l); }
      else { bytes += await layers.release(m.scratch); written.push(null); }
    } catch (e) { refused ??= e; written.push(null); }
  }
  return { written, bytes, ...(refused ? { refused } : {}) };
}

/** Drops the mounts' scratches (a query that failed before its sandbox ran). */
export async function discardMounts(layers: Snapshotter, mounted: readonly Mounted[]): Promise<void> {
  await Promise.all(mounted.map((m) => (m.scratch ? layers.discard(m.scratch).catch(() => undefined) : undefined)));
}

/** Each mount's result before any commit: the version it showed, nothing committed. */
export function mountResults(mounted: readonly Mounted[]): MountResult[] {
  return mounted.map((m) => ({ context: m.context, path: m.path, readOnly: m.readOnly, baseVersion: m.base.id, version: m.base.id, committed: false }));
}

/**
 * The parts of a commit of a query (`own`, over `base`) whose writable mounts wrote: the query's
 * own layer first (when it wrote), then each mount that wrote. Their causes name each other.
 */
export function commitParts(own: string, base: VersionRow, layer: CommittedLayer | null, cause: VersionCause,
  mounted: readonly Mounted[], written: readonly (CommittedLayer | null)[]): { parts: CommitPart[]; index: (number | null)[] } {
  const parts: CommitPart[] = [];
  const index: (number | null)[] = [];
  if (layer) parts.push({ context: own, base, layer, cause: (ids) => withMounts(cause, mounted, index, ids) });
  mounted.forEach((m, i) => {
    const l = written[i];
    if (!l) { index.push(null); return; }
    index.push(parts.length);
    parts.push({
      context: m.context, base: m.base, layer: l,
      cause: (ids) => ({ kind: 'exec', ...(cause.command !== undefined ? { command: cause.command } : {}), ...(cause.exitCode !== undefined ? { exitCode: cause.exitCode } : {}),
        mountedBy: { context: own, path: m.path, version: layer ? ids[0] : base.id } }),
    });
  });
  return { parts, index };
}

/** A cause with the mounts the query saw (and the versions their writes became, by `index` into `ids`). */
export function withMounts(cause: VersionCause, mounted: readonly Mounted[], index: readonly (number | null)[] = [], ids: readonly string[] = []): VersionCause {
  if (!mounted.length) return cause;
  return {
    ...cause,
    mounts: mounted.map((m, i) => {
      const k = index[i];
      return { context: m.context, path: m.path, version: m.base.id, readOnly: m.readOnly, ...(k !== null && k !== undefined ? { wrote: ids[k] } : {}) };
    }),
  };
}

/**
 * Puts the outcomes of a commit made together into the query's result: its own part's (when it
 * wrote) as a plain commit's, each mount's on its entry. A conflict of any part is the query's
 * conflict (nothing was committed): its own, else the first mount's, paths named as the query saw them.
 */
export function applyTogether(result: ExecResult, mounted: readonly Mounted[], ownWrote: boolean, index: readonly (number | null)[], outcomes: readonly CommitOutcome[]): CommitOutcome | null {
  const own = ownWrote ? outcomes[0] : null;
  if (own) {
    result.version = own.head;
    result.committed = own.committed;
    if (own.conflict) result.conflict = own.conflict;
  }
  const mounts = result.mounts ?? mountResults(mounted);
  mounted.forEach((m, i) => {
    const k = index[i];
    if (k === null) return;
    const o = outcomes[k];
    mounts[i] = { ...mounts[i], committed: o.committed, version: o.committed ? o.version : mounts[i].baseVersion, ...(o.conflict ? { conflict: o.conflict } : {}) };
    if (o.conflict && !result.conflict) {
      result.conflict = { paths: o.conflict.paths.map((p) => `${m.path}${p}`), version: own?.version ?? o.conflict.version };
    }
  });
  result.mounts = mounts;
  return own;
}

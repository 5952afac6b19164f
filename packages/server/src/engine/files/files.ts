import type { DirEntry, FileStat } from '@shellbase/protocol';
import type { Readable } from 'node:stream';
import { ShellbaseError, invalid, notFound } from '../../errors.js';
import type { VersionRow } from '../../store/metadata/types.js';
import type { ScratchWriter } from '../../store/snapshotter/types.js';
import { sandboxId } from '../../util/idmap.js';
import type { Committer } from '../commit.js';
import { checkStoredBytes, quotasOf } from '../../core/quotas.js';
import type { Squasher } from '../squash.js';
import type { Caller, Deps } from '../../core/deps.js';
import { joinPath, parsePath } from './paths.js';
import { notADirectory, VersionView, type Entry } from './view.js';
import { moveIntoLayer } from './tar.js';
import { ancestorsOf, attrsOf, makeParents, owned, place, under, whiteout, writeFile, type Owner } from './writer.js';

export type ReadResult =
  | { kind: 'file'; size: number; version: string; readAll(): Buffer; stream(range?: { start: number; end: number }): Readable }
  | { kind: 'dir'; entries: DirEntry[]; version: string };

export interface UploadOptions {
  /** File mode (default 0644). */
  mode?: number;
  /** Its owner as a sandbox sees it (default root). */
  owner?: Owner;
  /** The body's announced length, when known: refused at once past the disk limit. */
  length?: number;
}

interface Lookups {
  version(caller: Caller, id: string): Promise<VersionRow>;
  base(caller: Caller, name: string, version?: string): Promise<VersionRow>;
}

export const statOf = (e: Entry, target?: string): FileStat => ({
  type: e.type, size: e.type === 'file' ? e.stat.size : 0, mode: e.stat.mode & 0o7777,
  uid: sandboxId(e.stat.uid), gid: sandboxId(e.stat.gid), mtime: new Date(e.stat.mtimeMs).toISOString(),
  ...(target !== undefined ? { target } : {}),
});

/**
 * Files without a sandbox: reads straight from a version's layers, writes
 * and deletes as one-layer versions through the same commit path as a query.
 */
export class Files {
  constructor(
    private readonly deps: Deps,
    private readonly committer: Committer,
    private readonly squasher: Squasher,
    private readonly lookups: Lookups,
  ) {}

  /** The view of a version (the context's head unless `version` is given). */
  async view(caller: Caller, name: string, version?: string): Promise<{ view: VersionView; version: VersionRow }> {
    const v = await this.lookups.base(caller, name, version);
    return { view: await this.viewOf(v), version: v };
  }

  async viewOf(v: VersionRow): Promise<VersionView> {
    const layers = await Promise.all([...v.layers].reverse().map((id) => this.deps.snapshotter.reader(id)));
    return new VersionView(layers);
  }

  async read(caller: Caller, name: string, path: string, version?: string): Promise<ReadResult> {
    const segments = parsePath(path);
    this.deps.meter.fileOperation('read');
    const { view, version: v } = await this.view(caller, name, version);
    const e = view.resolve(segments);
    if (!e) throw notFound('path', path);
    if (e.type === 'dir') {
      const entries = view.list(e).map((c) => ({ name: c.segments[c.segments.length - 1], ...statOf(c) }));
      return { kind: 'dir', entries, version: v.id };
    }
    if (e.type !== 'file') throw invalid(`${path} is not a regular file`, 'read files or list directories');
    return { kind: 'file', size: e.stat.size, version: v.id, readAll: () => view.readAll(e), stream: (range) => view.stream(e, range) };
  }

  async stat(caller: Caller, name: string, path: string, version?: string): Promise<FileStat> {
    const { view } = await this.view(caller, name, version);
    const e = view.resolve(parsePath(path), false);
    if (!e) throw notFound('path', path);
    return statOf(e, e.type === 'symlink' ? view.readlink(e) : undefined);
  }

  async write(caller: Caller, name: string, path: string, body: Readable, opts: UploadOptions = {}): Promise<{ version: string }> {
    const segments = parsePath(path);
    const mode = opts.mode ?? 0o644;
    this.checkLength(opts.length);
    this.deps.meter.fileOperation('write');
    return this.change(caller, name, `write ${joinPath(segments)}`, async (view, w) => {
      const existing = view.resolve(segments);
      if (existing?.type === 'dir') throw invalid(`${path} is a directory`, 'write to a file path');
      const target = existing ? existing.segments : segments;
      await writeFile(w, place(view, target), body, mode, opts.owner);
    });
  }

  /** Unpacks a tar stream below directory `path` as one version. */
  async writeTar(caller: Caller, name: string, path: string, body: Readable, opts: Pick<UploadOptions, 'length'> = {}): Promise<{ version: string }> {
    const segments = parsePath(path);
    this.checkLength(opts.length);
    this.deps.meter.fileOperation('tar');
    return this.change(caller, name, `upload tar to ${joinPath(segments)}`, async (view, w) => {
      const existing = view.resolve(segments);
      if (existing && existing.type !== 'dir') throw notADirectory(existing.segments);
      await this.deps.runtime.unpackTar(body, w.staging());
      await moveIntoLayer(w, view, existing ? existing.segments : segments);
    });
  }

  async remove(caller: Caller, name: string, path: string, recursive = false): Promise<{ version: string }> {
    const segments = parsePath(path);
    this.deps.meter.fileOperation('delete');
    return this.change(caller, name, `delete ${joinPath(segments)}`, async (view, w) => {
      const e = view.resolve(segments, false);
      if (!e) throw notFound('path', path);
      if (e.segments.length === 0) throw invalid('the root cannot be deleted', 'delete what is below it');
      if (e.type === 'dir' && !recursive && view.list(e).length > 0) {
        throw invalid(`${joinPath(e.segments)} is a directory that is not empty`, 'pass recursive=true to delete it with its contents');
      }
      await whiteout(w, e, view);
    });
  }

  /**
   * Makes a directory (owned by `owner`, root by default), with its missing parents when
   * `parents`; one that exists is `already_exists` unless `parents`, which keeps it as it is.
   */
  async mkdir(caller: Caller, name: string, path: string, opts: { mode?: number; owner?: Owner; parents?: boolean } = {}): Promise<{ version: string }> {
    const segments = parsePath(path);
    this.deps.meter.fileOperation('write');
    return this.change(caller, name, `make directory ${joinPath(segments)}`, async (view, w) => {
      const existing = view.resolve(segments);
      if (existing?.type === 'dir' && opts.parents) return;
      if (existing) throw new ShellbaseError('already_exists', `${path} exists`, { details: { path }, hint: 'make a directory at a path that does not exist yet' });
      const p = place(view, segments);
      if (p.missing.length && !opts.parents) throw notFound('path', `/${segments.slice(0, -1).join('/')}`);
      w.mkdir(under(makeParents(w, p), p.name), owned(opts.mode ?? 0o755, opts.owner));
    });
  }

  /** Changes an entry's mode or owner (ids as a sandbox sees them): its content stays. */
  async setAttributes(caller: Caller, name: string, path: string, change: { mode?: number; uid?: number; gid?: number }): Promise<{ version: string }> {
    const segments = parsePath(path);
    this.deps.meter.fileOperation('write');
    return this.change(caller, name, `change attributes of ${joinPath(segments)}`, async (view, w) => {
      const e = view.resolve(segments, false);
      if (!e) throw notFound('path', path);
      if (e.segments.length === 0) throw invalid('the root\'s attributes stay', 'change an entry below /');
      const a = attrsOf(e);
      const attrs = {
        ...a, ...(change.mode !== undefined ? { mode: owned(change.mode).mode } : {}),
        ...(change.uid !== undefined ? { uid: owned(0, { uid: change.uid, gid: 0 }).uid } : {}), ...(change.gid !== undefined ? { gid: owned(0, { uid: 0, gid: change.gid }).gid } : {}),
      };
      // Its parents as they are (canonical segments: no symlink on the way).
      const target = under(makeParents(w, { ancestors: ancestorsOf(view, e.segments.slice(0, -1))!, missing: [], name: '' }), e.segments[e.segments.length - 1]);
      if (e.type === 'dir') w.mkdir(target, attrs);
      else if (e.type === 'file') await w.copyFile(view.layers[e.at.layer], e.at.rel, target, attrs);
      else if (e.type === 'symlink') w.symlink(target, view.readlink(e), attrs);
      else throw invalid(`${path} is neither a file, a directory nor a symlink`, 'change a file, a directory or a symlink');
    });
  }

  /** Deletes everything in the tree (every entry of its root) as one version. */
  async clear(caller: Caller, name: string): Promise<{ version: string }> {
    this.deps.meter.fileOperation('delete');
    return this.change(caller, name, 'delete everything', async (view, w) => {
      for (const e of view.list(view.resolve([])!)) await whiteout(w, e, view);
    });
  }

  /** An upload whose announced length passes the disk limit is refused before a byte is read. */
  private checkLength(length: number | undefined): void {
    const { diskMb } = this.deps.config.defaults;
    if (length !== undefined && length > diskMb * 1024 * 1024) {
      throw new ShellbaseError('payload_too_large', `the file is larger than the disk limit (${diskMb} MiB)`, { hint: 'write less than limits.diskMb at once' });
    }
  }

  /**
   * Changes made elsewhere over `baseVersion` (a machine's copy of a mounted context) as one
   * version: `deleted` paths (relative to the root, their descendants implied) and a tar of what
   * is new or changed. It commits as a query's writes do: rebased past what changed since, or a
   * conflict that keeps it (details.version).
   */
  async apply(caller: Caller, name: string, baseVersion: string, deleted: readonly string[], body: Readable, description: string): Promise<{ version: string }> {
    this.deps.meter.fileOperation('tar');
    const gone = [...deleted].map((p) => parsePath(p.startsWith('/') ? p : `/${p}`)).sort((a, b) => a.length - b.length);
    return this.change(caller, name, description, async (view, w) => {
      const done: string[][] = [];
      for (const segments of gone) {
        if (done.some((d) => d.every((x, i) => segments[i] === x))) continue; // below a deleted directory
        const e = view.resolve(segments, false);
        if (!e || e.segments.length === 0) continue;
        await whiteout(w, e, view);
        done.push(segments);
      }
      await this.deps.runtime.unpackTar(body, w.staging());
      await moveIntoLayer(w, view, []);
    }, baseVersion);
  }

  /** Builds one layer over the head (or `baseVersion`) with `fill`, then commits it as a `write` version. */
  private async change(caller: Caller, name: string, description: string,
    fill: (view: VersionView, w: ScratchWriter) => Promise<void>, baseVersion?: string): Promise<{ version: string }> {
    const { snapshotter: layers, config } = this.deps;
    const quotas = quotasOf(config, caller);
    await checkStoredBytes(this.deps.metadata, caller.tenantId, quotas);
    // Over a named version the context is not made on first use: work for a context deleted
    // meanwhile is kept unattached (Committer.commit), as a query's is.
    const base = await this.squasher.mountable(baseVersion ? await this.lookups.version(caller, baseVersion) : await this.lookups.base(caller, name));
    const view = await this.viewOf(base);
    const scratch = await layers.prepare({ diskMb: Math.min(config.defaults.diskMb, quotas.maximums.diskMb) });
    let layer;
    try {
      await fill(view, layers.writer(scratch));
      layer = await layers.commit(scratch);
    } catch (e) {
      await layers.discard(scratch);
      throw e;
    }
    if (!layer) return { version: base.id };
    const outcome = await this.committer.commit(caller.tenantId, name, base, layer, { kind: 'write', command: description });
    if (outcome.conflict) {
      throw new ShellbaseError('conflict', `${description} overlaps changes committed meanwhile`, {
        details: { paths: outcome.conflict.paths, version: outcome.conflict.version },
        hint: 'read the head again and retry; the attempted change is kept as details.version',
      });
    }
    if (outcome.committed) this.squasher.maybeSquash(caller.tenantId, name, outcome.layerCount);
    return { version: outcome.version };
  }
}

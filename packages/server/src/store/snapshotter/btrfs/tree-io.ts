import {
  chmodSync, chownSync, constants, copyFileSync, createReadStream, createWriteStream, lchownSync, lstatSync, lutimesSync, mkdirSync,
  readFileSync, readdirSync, readlinkSync, renameSync, symlinkSync, type Stats,
} from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { runOk } from '../../../util/proc.js';
import type { Change, EntryAttrs, LayerReader, LayerStat, ScratchWriter } from '../types.js';
import { scanLayer } from './scan.js';

/** A host lstat as the snapshotter's vocabulary says it. */
export function layerStat(st: Stats): LayerStat {
  const kind = st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink'
    : st.isCharacterDevice() && st.rdev === 0 ? 'whiteout' : 'other';
  return {
    kind, mode: st.mode & 0o7777, uid: st.uid, gid: st.gid, size: st.isFile() ? st.size : 0, rdev: st.rdev,
    atimeMs: st.atimeMs, mtimeMs: st.mtimeMs,
  };
}

/** A layer's (or an image's) tree on this host, read with plain file system calls. */
export class DirReader implements LayerReader {
  constructor(readonly layerId: string, private readonly root: string, readonly opaque: ReadonlySet<string>) {}

  private at(rel: string): string { return rel === '' ? this.root : path.join(this.root, rel); }

  stat(rel: string): LayerStat | null {
    try { return layerStat(lstatSync(this.at(rel))); } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return null;
      throw e;
    }
  }

  list(rel: string): string[] {
    try { return readdirSync(this.at(rel)); } catch { return []; }
  }

  readlink(rel: string): string { return readlinkSync(this.at(rel)); }
  readAll(rel: string): Buffer { return readFileSync(this.at(rel)); }
  stream(rel: string, range?: { start: number; end: number }): Readable { return createReadStream(this.at(rel), range); }

  /** Where a file of the layer is, for a copy on the same host (a reflink where the file system allows). */
  hostPath(rel: string): string { return this.at(rel); }
}

const applyAttrs = (p: string, a: EntryAttrs, symlink = false) => {
  lchownSync(p, a.uid, a.gid);
  if (!symlink) chmodSync(p, a.mode & 0o7777);
  if (a.atimeMs !== undefined && a.mtimeMs !== undefined) lutimesSync(p, a.atimeMs / 1000, a.mtimeMs / 1000);
};

/** Writes into a scratch's tree; `staging` sits beside the tree on the same file system. */
export class DirWriter implements ScratchWriter {
  constructor(private readonly root: string, private readonly stagingDir: () => string) {}

  private at(rel: string): string { return rel === '' ? this.root : path.join(this.root, rel); }

  mkdir(rel: string, attrs: EntryAttrs): void {
    const p = this.at(rel);
    mkdirSync(p, { recursive: true, mode: attrs.mode });
    applyAttrs(p, attrs);
  }

  async writeFile(rel: string, body: Readable, attrs: EntryAttrs): Promise<void> {
    const p = this.at(rel);
    try {
      await pipeline(body, createWriteStream(p, { mode: attrs.mode }));
    } catch (e) {
      // libuv names no EDQUOT (btrfs's qgroup limit): errno 122 comes as "Unknown system error".
      const err = e as NodeJS.ErrnoException;
      if (err.errno === -122) err.code = 'EDQUOT';
      throw err;
    }
    chownSync(p, attrs.uid, attrs.gid);
    chmodSync(p, attrs.mode & 0o7777);
  }

  symlink(rel: string, target: string, attrs: EntryAttrs): void {
    const p = this.at(rel);
    symlinkSync(target, p);
    applyAttrs(p, attrs, true);
  }

  async whiteout(rel: string): Promise<void> {
    await runOk('mknod', [this.at(rel), 'c', '0', '0']);
  }

  async setOpaque(rel: string): Promise<void> {
    await runOk('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', this.at(rel)]);
  }

  async copyFile(from: LayerReader, rel: string, to: string, attrs?: EntryAttrs): Promise<void> {
    const st = from.stat(rel);
    if (!st || st.kind !== 'file') throw new Error(`${from.layerId}:${rel} is not a file`);
    const p = this.at(to);
    if (from instanceof DirReader) copyFileSync(from.hostPath(rel), p, constants.COPYFILE_FICLONE);
    else await pipeline(from.stream(rel), createWriteStream(p));
    applyAttrs(p, attrs ?? st);
  }

  staging(): { source: string } { return { source: this.stagingDir() }; }

  async stagedChanges(): Promise<Change[]> { return (await scanLayer(this.stagingDir())).changes; }

  stagedStat(rel: string): LayerStat { return layerStat(lstatSync(path.join(this.stagingDir(), rel))); }

  adopt(stagedRel: string, to: string): void { renameSync(path.join(this.stagingDir(), stagedRel), this.at(to)); }

  tree(): { source: string } { return { source: this.root }; }
}

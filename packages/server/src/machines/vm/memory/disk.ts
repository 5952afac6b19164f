import { existsSync, lstatSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Snapshotter } from '../../../store/snapshotter/types.js';

/** One entry of a guest's file system. */
export type Entry =
  | { type: 'file'; data: Buffer; mode: number }
  | { type: 'dir'; mode: number }
  | { type: 'symlink'; target: string };

/** An entry as a disk file stores it (a file's bytes in base64); null: deleted over the files below. */
type StoredEntry = { type: 'file'; data: string; mode: number } | { type: 'dir'; mode: number } | { type: 'symlink'; target: string } | null;

/** Bump when what a disk file holds changes. */
const DISK_FORMAT = 1;

/**
 * One file of an in-memory VM's disk chain, as JSON: the entries it sets or deletes over the
 * file it is backed by (a path relative to its own directory, as qcow2 resolves one), and the
 * disk's size as the guest sees it.
 */
interface DiskFile {
  format: typeof DISK_FORMAT;
  kind: 'shellbase-memory-disk';
  backing: string | null;
  sizeBytes: number;
  entries: Record<string, StoredEntry>;
}

function readDiskFile(file: string): DiskFile {
  let d: DiskFile;
  try {
    d = JSON.parse(readFileSync(file, 'utf8')) as DiskFile;
  } catch (e) {
    throw new Error(`${file} is not a disk of the in-memory VMs: ${(e as Error).message}`);
  }
  if (d.kind !== 'shellbase-memory-disk' || d.format !== DISK_FORMAT) throw new Error(`${file} is not a disk of the in-memory VMs (format ${String(d.format)})`);
  return d;
}

function writeDiskFile(file: string, d: DiskFile): void {
  writeFileSync(file, JSON.stringify(d));
}

const decode = (e: StoredEntry): Entry | null => (e === null ? null : e.type === 'file' ? { ...e, data: Buffer.from(e.data, 'base64') } : e);
const encode = (e: Entry | null): StoredEntry => (e === null ? null : e.type === 'file' ? { ...e, data: e.data.toString('base64') } : e);

/** A new top at `file` over `backing` (relative paths resolved from `file`'s directory), the disk's size kept. */
export function makeOverlay(backing: string, file: string): void {
  const below = readDiskFile(path.resolve(path.dirname(file), backing));
  writeDiskFile(file, { format: DISK_FORMAT, kind: 'shellbase-memory-disk', backing, sizeBytes: below.sizeBytes, entries: {} });
}

/**
 * A disk chain as one VM uses it: every file's entries merged (bottom first), writes going to the
 * top file as they happen (a write-through disk: what was written survives the VM's end).
 */
export class DiskChain {
  /** The merged view: path → entry (absolute paths, `/` itself absent). */
  readonly entries = new Map<string, Entry>();
  private top: string;
  private topFile: DiskFile;

  /** `files`: the chain's files, writable top first (each must be backed by the next). */
  constructor(files: readonly string[]) {
    if (files.length === 0) throw new Error('a disk chain has at least one file');
    const chain: DiskFile[] = [];
    let at: string | null = files[0]!;
    while (at !== null) {
      if (!existsSync(at)) throw new Error(`disk file ${at} is missing`);
      const d = readDiskFile(at);
      chain.push(d);
      at = d.backing === null ? null : path.resolve(path.dirname(at), d.backing);
    }
    for (const d of chain.reverse()) this.apply(d.entries);
    this.top = files[0]!;
    this.topFile = chain[chain.length - 1]!;
  }

  get sizeBytes(): number { return this.topFile.sizeBytes; }

  /** Sets (or with null deletes, with everything below it) the entry at `p`, in the top file too. */
  set(p: string, e: Entry | null): void {
    const changed: Record<string, StoredEntry> = {};
    if (e === null) {
      for (const k of [...this.entries.keys()]) if (k === p || k.startsWith(`${p}/`)) { this.entries.delete(k); changed[k] = null; }
    } else {
      this.entries.set(p, e);
      changed[p] = encode(e);
    }
    Object.assign(this.topFile.entries, changed);
    writeDiskFile(this.top, this.topFile);
  }

  /** `overlay` (made over the current top) takes the writes from now on; the current top is frozen. */
  freeze(overlay: string): void {
    const next = readDiskFile(overlay);
    if (next.backing === null || path.resolve(path.dirname(overlay), next.backing) !== path.resolve(this.top)) {
      throw new Error(`${overlay} is not backed by the disk's top (${this.top})`);
    }
    this.top = overlay;
    this.topFile = next;
  }

  resize(bytes: number): void {
    if (bytes < this.topFile.sizeBytes) throw new Error('a disk never shrinks');
    this.topFile.sizeBytes = bytes;
    writeDiskFile(this.top, this.topFile);
  }

  private apply(entries: Record<string, StoredEntry>): void {
    for (const [p, e] of Object.entries(entries)) {
      if (e === null) {
        for (const k of [...this.entries.keys()]) if (k === p || k.startsWith(`${p}/`)) this.entries.delete(k);
      } else {
        this.entries.set(p, decode(e)!);
      }
    }
  }
}

/**
 * A bootable base disk of `sizeBytes` at `out`: the snapshotter's `layers` (bottom first) merged
 * as overlayfs merges them (whiteouts and opaque directories hide what is below), then the host
 * directories of `above` (top first) over them.
 */
export async function buildMemoryDisk(snapshotter: Snapshotter, layers: readonly string[], above: readonly string[], out: string, sizeBytes: number): Promise<void> {
  const entries = new Map<string, StoredEntry>();
  const drop = (p: string) => { for (const k of [...entries.keys()]) if (k === p || k.startsWith(`${p}/`)) entries.delete(k); };
  for (const id of layers) {
    const r = await snapshotter.reader(id);
    const walk = (rel: string) => {
      for (const name of r.list(rel)) {
        const child = rel ? `${rel}/${name}` : name;
        const st = r.stat(child);
        const p = `/${child}`;
        if (!st) continue;
        if (st.kind === 'whiteout') { drop(p); continue; }
        if (st.kind === 'dir') {
          if (r.opaque.has(child) || entries.get(p)?.type !== 'dir') drop(p);
          entries.set(p, { type: 'dir', mode: st.mode });
          walk(child);
        } else if (st.kind === 'symlink') {
          drop(p);
          entries.set(p, { type: 'symlink', target: r.readlink(child) });
        } else if (st.kind === 'file') {
          drop(p);
          entries.set(p, { type: 'file', data: r.readAll(child).toString('base64'), mode: st.mode });
        }
      }
    };
    walk('');
  }
  for (const dir of [...above].reverse()) addHostTree(entries, dir, '');
  writeDiskFile(out, { format: DISK_FORMAT, kind: 'shellbase-memory-disk', backing: null, sizeBytes, entries: Object.fromEntries(entries) });
}

/** A host directory in overlay format over `entries` (files, directories, symlinks; 0/0 character devices are whiteouts). */
function addHostTree(entries: Map<string, StoredEntry>, dir: string, rel: string): void {
  for (const name of readdirSync(path.join(dir, rel))) {
    const child = `${rel}/${name}`;
    const host = path.join(dir, child);
    const st = lstatSync(host);
    if (!(st.isDirectory() && entries.get(child)?.type === 'dir')) {
      for (const k of [...entries.keys()]) if (k === child || k.startsWith(`${child}/`)) entries.delete(k);
    }
    if (st.isCharacterDevice() && st.rdev === 0) continue;
    if (st.isDirectory()) { entries.set(child, { type: 'dir', mode: st.mode & 0o7777 }); addHostTree(entries, dir, child); }
    else if (st.isSymbolicLink()) entries.set(child, { type: 'symlink', target: readlinkSync(host) });
    else if (st.isFile()) entries.set(child, { type: 'file', data: readFileSync(host).toString('base64'), mode: st.mode & 0o7777 });
  }
}

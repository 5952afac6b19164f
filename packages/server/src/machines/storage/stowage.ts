import type { Dialer } from '../../util/dialer.js';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, linkSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { ShellbaseError } from '../../errors.js';
import { CAN_FETCH, LOCATION_TTL_S, fetchMayPass, packLayer, unpackLayer } from '../../store/blobs/pack.js';
import { withFetchRetries } from '../../util/curl.js';
import type { BlobStore } from '../../store/blobs/types.js';
import type { StoredFile, StoredMachineFiles } from '../../store/metadata/types.js';
import { newId } from '../../util/ids.js';
import { runOk } from '../../util/proc.js';
import { copySparse } from './disk.js';
import type { MachineLayout } from '../layout.js';

/** A machine's files on this worker: its RAM file, device state, and disk chain (writable top first). */
export interface LocalMachineFiles {
  ram: string;
  state: string;
  disk: string[];
}

/** What `fetch` makes on this worker: where the RAM and state go, and where the writable top of the disk goes. */
export interface FetchTargets {
  ram: string;
  state: string;
  top: string;
}

/**
 * Machines' files in the object store (cluster mode): a hibernated machine's memory and disk, and
 * snapshots', so that any worker restores them. Each file is one blob, a packed tree
 * (store/blobs/pack.ts: zstd, sparse files kept sparse) holding it under a name that says what it
 * is. Frozen files (every disk file below the writable top: templates' and snapshots' layers) never
 * change, so each is packed once per worker (`known/` remembers its digest, checked against the
 * store before it is trusted); a worker that fetches one keeps it under `blobs/DIGEST/`, its
 * backing rebased onto its own copy of the next, and uses it again.
 *
 * The blobs are as sensitive as the machine's memory (docs/security.md). Collection deletes them
 * from the object store once no machine or snapshot names them (machines/placement.ts, after the
 * grace period); `collect` deletes this worker's fetched copies that no disk chain names.
 */
export class MachineStowage {
  /** Fetches in flight, by digest: concurrent restores of one chain fetch each file once. */
  private readonly fetching = new Map<string, Promise<string>>();

  constructor(private readonly blobs: BlobStore, private readonly layout: MachineLayout, private readonly log: Logger, private readonly dialer: Dialer) {}

  /**
   * Stores `files` (RAM, state and the writable top of the disk always; the frozen files below it,
   * found by following the top's backing files to the bottom, unless stored before). `frozenTop`:
   * the top is frozen too (a snapshot's).
   */
  async store(files: LocalMachineFiles, { frozenTop = false }: { frozenTop?: boolean } = {}): Promise<StoredMachineFiles> {
    const disk = await this.storeDisk(files.disk[0], { frozenTop });
    const [ram, state] = await Promise.all([this.storeFile(files.ram, 'ram', false), this.storeFile(files.state, 'state.bin', false)]);
    return { format: 1, id: newId('st'), ram, state, disk };
  }

  /** A disk's chain from `top` down (found by following backing files), top first; frozen files stored before are not packed again. */
  async storeDisk(top: string, { frozenTop = false }: { frozenTop?: boolean } = {}): Promise<StoredFile[]> {
    const disk: StoredFile[] = [];
    for (const [i, f] of (await backingChain(top)).entries()) disk.push(await this.storeFile(f.file, f.name, i > 0 || frozenTop));
    return disk;
  }

  /** A machine's memory or device state file as a blob. */
  storeMemory(file: string, name: 'ram' | 'state.bin'): Promise<StoredFile> {
    return this.storeFile(file, name, false);
  }

  /**
   * Makes `stored` usable here: RAM and state at `to`, the writable top of its disk at `to.top`
   * (a copy of its own), the frozen files under `blobs/`. Returns the local disk chain, top first.
   */
  async fetch(stored: StoredMachineFiles, to: FetchTargets): Promise<string[]> {
    const chain = await this.frozenChain(stored, 1);
    // All three settle before this answers: none is still writing (or cleaning up) when a caller
    // that saw one fail goes on.
    const done = await Promise.allSettled([this.fetchFile(stored.ram, to.ram), this.fetchFile(stored.state, to.state), this.fetchFile(stored.disk[0], to.top, chain[1])]);
    for (const d of done) if (d.status === 'rejected') throw d.reason;
    chain[0] = to.top;
    return chain;
  }

  /** A snapshot's files here: its whole disk chain under `blobs/`, its RAM and state in `dir` (fetched once). */
  async fetchSnapshot(stored: StoredMachineFiles, dir: string): Promise<LocalMachineFiles> {
    const disk = await this.frozenChain(stored, 0);
    const { ram, state } = this.layout.snapshotFiles(dir);
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    if (!existsSync(ram)) await this.fetchFile(stored.ram, ram);
    if (!existsSync(state)) await this.fetchFile(stored.state, state);
    return { ram, state, disk };
  }

  /** The chain's frozen files from index `from` on, fetched bottom up (each rebased onto this worker's copy of the one below it). */
  private async frozenChain(stored: StoredMachineFiles, from: number): Promise<string[]> {
    if (stored.format !== 1) {
      throw new ShellbaseError('failed_precondition', `machine files stored in format ${String((stored as { format: unknown }).format)} are not known to this worker`, {
        hint: 'run the same shellbase version on every worker',
      });
    }
    const chain: string[] = new Array<string>(stored.disk.length);
    for (let i = stored.disk.length - 1; i >= from; i--) chain[i] = await this.frozen(stored.disk[i], chain[i + 1]);
    return chain;
  }

  /** Unpacks one stored file to `file` (a qcow2 one rebased onto `backing`). */
  async fetchFile(f: StoredFile, file: string, backing?: string): Promise<void> {
    const dir = await this.unpack(f, `${file}.fetch-${newId('t')}`);
    try {
      const inner = path.join(dir, f.name);
      if (backing) await rebase(inner, backing);
      renameSync(inner, file);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  /** A frozen disk file here (fetched once per worker): its path. */
  private frozen(f: StoredFile, backing: string | undefined): Promise<string> {
    const hex = f.digest.replace(/^sha256:/, '');
    const final = path.join(this.layout.blobsDir, hex);
    const file = path.join(final, f.name);
    if (existsSync(file)) {
      touch(final);
      return Promise.resolve(file);
    }
    let p = this.fetching.get(f.digest);
    if (!p) {
      p = (async () => {
        this.blobsDir();
        const dir = await this.unpack(f, `${final}.fetch-${newId('t')}`);
        try {
          if (backing) await rebase(path.join(dir, f.name), backing);
          chmodSync(dir, 0o755);
          touch(dir);
          renameSync(dir, final);
        } catch (e) {
          rmSync(dir, { recursive: true, force: true });
          throw e;
        }
        this.remember(file, f);
        return file;
      })().finally(() => this.fetching.delete(f.digest));
      this.fetching.set(f.digest, p);
    }
    return p;
  }

  private async unpack(f: StoredFile, dir: string): Promise<string> {
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    try {
      // As a layer's (store/snapshotter/cluster): curl fetches the file from the store's URL
      // straight into its unpacking when the store gives one, so no byte passes through here.
      const located = CAN_FETCH ? await this.blobs.locate?.(f.digest, LOCATION_TTL_S).catch(() => null) : null;
      if (located) {
        // curl retries nothing itself (util/curl.ts): a fetch that may pass is tried again into an
        // empty directory, by a new URL (the first may have expired during a long fetch).
        let tries = 0;
        await withFetchRetries(async () => {
          const url = (tries++ === 0 ? null : await this.blobs.locate?.(f.digest, LOCATION_TTL_S).catch(() => null)) ?? located;
          rmSync(dir, { recursive: true, force: true });
          mkdirSync(dir, { recursive: true, mode: 0o755 });
          await unpackLayer(this.dialer, url, dir);
        }, fetchMayPass);
      } else {
        await unpackLayer(this.dialer, await this.blobs.get(f.digest), dir);
      }
    } catch (e) {
      rmSync(dir, { recursive: true, force: true });
      if ((e as { code?: string }).code === 'not_found') {
        throw new ShellbaseError('failed_precondition', `a stored machine file (${f.name}, ${f.digest}) is missing from the object store`, { hint: 'restore from another snapshot, or delete the machine' });
      }
      // The object store could not be reached (a partition, a restart): retry later.
      if (fetchMayPass(e)) {
        throw new ShellbaseError('unavailable', `fetching a stored machine file (${f.name}) from the object store failed: ${(e as Error).message}`, {
          hint: 'check that the object store is reachable from this worker; the request can be retried', cause: e,
        });
      }
      throw e;
    }
    return dir;
  }

  /** One file as a blob; a frozen one stored before (and still in the store) is not packed again. */
  private async storeFile(file: string, name: string, frozen: boolean): Promise<StoredFile> {
    if (frozen) {
      const known = this.known(file);
      if (known && (await this.blobs.stat(known.digest))) return known;
    }
    // A directory holding only the file (a hard link; a copy across file systems) is what gets packed.
    const tmp = path.join(this.blobsDir(), 'tmp');
    mkdirSync(tmp, { recursive: true, mode: 0o700 });
    const dir = path.join(tmp, newId('t'));
    mkdirSync(dir, { mode: 0o755 });
    try {
      try { linkSync(file, path.join(dir, name)); } catch { await copySparse(file, path.join(dir, name)); }
      const { digest } = await this.blobs.put(packLayer(this.dialer, dir, { level: 1 }));
      const stored = { digest, name };
      if (frozen) this.remember(file, stored);
      return stored;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  /**
   * Deletes the frozen files this worker fetched that no disk chain in `inUse` names and nothing
   * used (fetched, or found here by a fetch) for `idleMs`; returns how many went.
   */
  collect(inUse: ReadonlySet<string>, idleMs: number): number {
    let entries: string[] = [];
    try { entries = readdirSync(this.layout.blobsDir); } catch { return 0; }
    let n = 0;
    for (const hex of entries.filter((e) => /^[0-9a-f]{64}$/.test(e))) {
      const dir = path.join(this.layout.blobsDir, hex);
      if (this.fetching.has(`sha256:${hex}`)) continue;
      try {
        if (readdirSync(dir).some((f) => inUse.has(path.join(dir, f))) || Date.now() - statSync(dir).mtimeMs < idleMs) continue;
        rmSync(dir, { recursive: true, force: true });
        n++;
      } catch (err) {
        this.log.warn({ err, dir }, 'collecting a fetched machine file failed');
      }
    }
    return n;
  }

  /** The blob a frozen file was stored as, if this worker stored or fetched it (and it has not changed since). */
  private known(file: string): StoredFile | null {
    try {
      const k = JSON.parse(readFileSync(this.knownFile(file), 'utf8')) as KnownFile;
      const st = statSync(file);
      return k.format === 1 && k.path === file && k.size === st.size && k.mtimeMs === st.mtimeMs ? { digest: k.digest, name: k.name } : null;
    } catch {
      return null;
    }
  }

  private remember(file: string, f: StoredFile): void {
    try {
      const st = statSync(file);
      this.blobsDir();
      mkdirSync(path.dirname(this.knownFile(file)), { recursive: true, mode: 0o700 });
      const k: KnownFile = { format: 1, path: file, size: st.size, mtimeMs: st.mtimeMs, digest: f.digest, name: f.name };
      writeFileSync(this.knownFile(file), JSON.stringify(k));
    } catch (err) {
      this.log.warn({ err, file }, 'could not remember a stored machine file (it is packed again next time)');
    }
  }

  /** `blobs/`, passable by QEMU's uid (it reads the frozen files in it), not listable. */
  private blobsDir(): string {
    mkdirSync(this.layout.blobsDir, { recursive: true, mode: 0o711 });
    chmodSync(this.layout.blobsDir, 0o711);
    return this.layout.blobsDir;
  }

  private knownFile(file: string): string {
    return path.join(this.layout.blobsDir, 'known', `${createHash('sha256').update(file).digest('hex')}.json`);
  }
}

/** What `known/` holds per frozen file (format 1). */
interface KnownFile {
  format: 1;
  path: string;
  size: number;
  mtimeMs: number;
  digest: string;
  name: string;
}

/** Marks a fetched file's directory as used now (collect reads it). */
function touch(dir: string): void {
  const now = new Date();
  try { utimesSync(dir, now, now); } catch { /* gone meanwhile: the next fetch makes it again */ }
}

/** A disk's files, top first down to its base, each with the name its pack gives it (by its format). */
async function backingChain(top: string): Promise<{ file: string; name: string }[]> {
  // -U: a snapshot's frozen files are open (read-only) in the running QEMU.
  const info = JSON.parse((await runOk('qemu-img', ['info', '-U', '--backing-chain', '--output=json', top])).toString()) as { filename: string; format: string }[];
  return info.map((i) => ({ file: i.filename, name: i.format === 'raw' ? 'disk.raw' : 'disk.qcow2' }));
}

/** Points a qcow2 file at `backing` without reading either (only its header changes). */
async function rebase(file: string, backing: string): Promise<void> {
  if (file.endsWith('.raw')) return;
  await runOk('qemu-img', ['rebase', '-u', '-b', backing, '-F', backing.endsWith('.raw') ? 'raw' : 'qcow2', file]);
}

import type { Dialer } from '../../../util/dialer.js';
import { chownSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { opendir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { newId } from '../../../util/ids.js';
import { SBX_STORE } from '../../../util/native.js';
import { isImageLayer, newImportedLayerId } from '../../layer-ids.js';
import { runOk } from '../../../util/proc.js';
import { scanLayer, type ScanResult } from './scan.js';
import { storeOp, storeServer } from './store-server.js';
import type { Change, CommittedLayer, LayerReader, LayerTarring, LayerTransfer, MountSpec, Scratch, ScratchWriter, Snapshotter } from '../types.js';
import { planWhiteouts } from '../oci-whiteouts.js';
import { DirReader, DirWriter } from './tree-io.js';
import { packLayer, packProgram, tarTree, unpackLayer, type PackProgram } from '../../blobs/pack.js';
import { Readable } from 'node:stream';
import type { PackSource } from '../../blobs/types.js';
import { closeVolume, openVolume } from './volume.js';
import { removeTree, unlinkQuiet } from '../../../util/remove.js';

/** Version of `layers/ID/meta.json`. */
export const LAYER_META_FORMAT = 1;
/**
 * Version of the store as a whole (`format` at its root): 2 stores file
 * ownership as the sandboxes' user namespace maps it; a store without the file
 * is 1 (ids unshifted) and is shifted on open.
 */
export const STORE_FORMAT = 2;

export interface BtrfsSnapshotterOptions {
  /** Mount point of the store's btrfs file system. */
  root: string;
  /** Sparse file holding the file system when `root`'s parent is not on btrfs. */
  imageFile: string;
  sizeGb: number;
  /** Resolves an image layer id to its tree (images live outside the store). */
  imagePath: (layerId: string) => string;
  /** Disk limit of pre-made scratch subvolumes (the default a query gets). */
  defaultDiskMb: number;
  /** Host uid and gid of the sandboxes' root: it owns every new tree. */
  rootId: number;
  /** Starts the tar that packs or unpacks a layer for the blob store (util/dialer.ts). */
  dialer: Dialer;
  poolSize?: number;
}

/**
 * The snapshotter on btrfs. Each scratch is a subvolume (`scratch/ID`, holding `tree/`,
 * the overlay upper directory, and `work/`) with a qgroup limit: that is the
 * per-query disk limit, since XFS/ext4 project quotas are not available on
 * these kernels. Committing renames the subvolume to `layers/ID` (zero copy).
 * Subvolume creation costs a process start, so a few are made ahead of use.
 * What the query path changes in the store goes through the thread pool
 * (fs/promises): a btrfs operation can wait for a transaction commit (another
 * query's disk fill forces some), which must not stall the event loop.
 */
export class BtrfsSnapshotter implements Snapshotter, LayerTransfer, LayerTarring {
  private pool: Scratch[] = [];
  private readonly readers = new Map<string, DirReader>();
  private filling: Promise<void> | null = null;
  private closed = false;

  constructor(private readonly opts: BtrfsSnapshotterOptions) {}

  private get scratchDir() { return path.join(this.opts.root, 'scratch'); }
  private get layersDir() { return path.join(this.opts.root, 'layers'); }
  private scratchPath(s: Scratch) { return path.join(this.scratchDir, s.id); }

  async open(): Promise<void> {
    storeServer.start();
    await openVolume(this.opts.root, this.opts.imageFile, this.opts.sizeGb);
    mkdirSync(this.scratchDir, { recursive: true });
    mkdirSync(this.layersDir, { recursive: true });
    const formatFile = path.join(this.opts.root, 'format');
    if (existsSync(formatFile)) {
      const format = Number(readFileSync(formatFile, 'utf8'));
      if (format !== STORE_FORMAT) throw new Error(`layer store ${this.opts.root} has format ${format}; this server knows ${STORE_FORMAT}`);
      return;
    }
    // Format 1: trees owned by host ids. Shifting skips ids already shifted, so a crash here only repeats it.
    for (const name of readdirSync(this.layersDir)) {
      if (!name.endsWith('.json')) await runOk(SBX_STORE, ['shift', path.join(this.layersDir, name, 'tree'), String(this.opts.rootId)]);
    }
    writeFileSync(formatFile, `${STORE_FORMAT}\n`);
  }

  async recover(known: (ids: string[]) => Promise<Set<string>>): Promise<{ scratch: number; layers: number }> {
    this.pool = [];
    let scratch = 0;
    let layers = 0;
    for (const name of readdirSync(this.scratchDir)) {
      await removeSubvolumeOrTree(path.join(this.scratchDir, name));
      scratch++;
    }
    // A batch of names at a time: the store may hold hundreds of thousands of layers.
    const dir = await opendir(this.layersDir);
    let batch: string[] = [];
    const settle = async () => {
      const ids = [...new Set(batch.map((n) => (n.endsWith('.json') ? n.slice(0, -5) : n)))];
      const keep = await known(ids);
      for (const name of batch) {
        if (name.endsWith('.json')) {
          if (!keep.has(name.slice(0, -5))) rmSync(path.join(this.layersDir, name));
        } else if (!keep.has(name)) {
          await removeSubvolumeOrTree(path.join(this.layersDir, name));
          layers++;
        }
      }
      batch = [];
    };
    for await (const entry of dir) {
      batch.push(entry.name);
      if (batch.length >= 1000) await settle();
    }
    await settle();
    return { scratch, layers };
  }

  async prepare({ diskMb }: { diskMb: number }): Promise<Scratch> {
    const fromPool = this.pool.shift();
    this.refill();
    if (fromPool) {
      if (fromPool.diskMb !== diskMb) await this.setLimit(fromPool, diskMb).catch(async (e: unknown) => { await this.discard(fromPool).catch(() => undefined); throw e; });
      return fromPool;
    }
    return this.createScratch(diskMb);
  }

  private refill(): void {
    if (this.filling || this.closed) return;
    const want = this.opts.poolSize ?? 4;
    this.filling = (async () => {
      while (!this.closed && this.pool.length < want) {
        this.pool.push(await this.createScratch(this.opts.defaultDiskMb));
      }
    })().catch(() => undefined).finally(() => { this.filling = null; });
  }

  /** A scratch subvolume; `limited: false` for the store's own work (fetching, squashing), which sets no qgroup limit. */
  private async createScratch(diskMb: number, limited = true): Promise<Scratch> {
    const s: Scratch = { id: newId('s'), diskMb };
    // One request to `sbx-store serve` (ioctls, native/subvol.c): the subvolume, its tree/ (the
    // sandboxes' root's), work/ and merged/, and its limit (0: none).
    await storeOp('scratch', this.scratchPath(s), [this.opts.rootId, limited ? diskMb : 0]);
    return s;
  }

  private async setLimit(s: Scratch, diskMb: number): Promise<void> {
    await storeOp('limit', this.scratchPath(s), [diskMb]);
    s.diskMb = diskMb;
  }

  async mounts(layers: readonly string[], scratch: Scratch): Promise<MountSpec> {
    const lower = [...layers].reverse().map((id) => this.relativeLayerPath(id)).join(':');
    const base = `scratch/${scratch.id}`;
    return { chdir: this.opts.root, lower, upper: `${base}/tree`, work: `${base}/work`, merged: `${base}/merged` };
  }

  private relativeLayerPath(layerId: string): string {
    return isImageLayer(layerId) ? this.opts.imagePath(layerId) : `layers/${layerId}/tree`;
  }

  private layerPath(layerId: string): string {
    return isImageLayer(layerId) ? this.opts.imagePath(layerId) : path.join(this.layersDir, layerId, 'tree');
  }

  async commit(scratch: Scratch): Promise<CommittedLayer | null> {
    const tree = this.scratchTree(scratch);
    if (untouched(tree)) {
      await this.recycle(scratch);
      return null;
    }
    const { changes, bytes } = await this.scanOrDiscard(scratch);
    return { layerId: await this.promote(this.scratchPath(scratch), changes), bytes, changes };
  }

  async commitImport(scratch: Scratch, layerId?: string): Promise<CommittedLayer> {
    const tree = this.scratchTree(scratch);
    let { changes, bytes } = await this.scanOrDiscard(scratch);
    const plan = planWhiteouts(changes);
    if (plan.remove.length) {
      try {
        for (const rel of plan.remove) await removeTree(path.join(tree, rel));
        // One process per batch, not per path: a layer may delete thousands of files.
        for (let i = 0; i < plan.whiteouts.length; i += 500) {
          await runOk('sh', ['-c', 'for p; do mknod "$p" c 0 0 || exit 1; done', 'sh', ...plan.whiteouts.slice(i, i + 500).map((r) => path.join(tree, r))]);
        }
        for (let i = 0; i < plan.opaque.length; i += 500) {
          await runOk('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', ...plan.opaque.slice(i, i + 500).map((r) => (r ? path.join(tree, r) : tree))]);
        }
      } catch (e) {
        await this.discard(scratch);
        throw e;
      }
      ({ changes, bytes } = await this.scanOrDiscard(scratch));
    }
    return { layerId: await this.promote(this.scratchPath(scratch), changes, layerId ?? newImportedLayerId()), bytes, changes };
  }

  async release(scratch: Scratch): Promise<number> {
    const tree = this.scratchTree(scratch);
    if (untouched(tree)) {
      await this.recycle(scratch);
      return 0;
    }
    const { bytes } = await this.scanOrDiscard(scratch);
    await this.discard(scratch);
    return bytes;
  }

  /** A scratch that cannot be scanned (a path too deep) is dropped, and the error goes on. */
  private async scanOrDiscard(scratch: Scratch): Promise<ScanResult> {
    try {
      return await scanLayer(this.scratchTree(scratch));
    } catch (e) {
      await this.discard(scratch);
      throw e;
    }
  }

  /**
   * An untouched scratch is as good as new: back to the pool (a read-only query
   * then costs no subvolume create or delete).
   */
  private async recycle(scratch: Scratch): Promise<void> {
    // Most scratches never had one: a synchronous look costs less than a trip through libuv's pool.
    const staging = path.join(this.scratchPath(scratch), 'staging');
    if (lstatSync(staging, { throwIfNoEntry: false })) await removeTree(staging);
    if (!this.closed && this.pool.length < (this.opts.poolSize ?? 4) * 2) this.pool.push(scratch);
    else await this.discard(scratch);
  }

  /**
   * Turns a scratch subvolume into a layer by renaming it into `layers/` (zero
   * copy), beside its `ID.json` (LAYER_META_FORMAT): the opaque directories,
   * which views need and Node cannot read from xattrs. The tree is renamed first and
   * the meta file written after, so a layer whose meta file exists is complete.
   */
  private async promote(dir: string, changes: Change[], layerId = newId('l')): Promise<string> {
    // The overlay work directory keeps a root-only `work/work` inside; neither it nor a tar
    // upload's staging belongs in a layer.
    await storeOp('clear', dir);
    // Beside the subvolume, not in it: a scratch that met its disk limit has no room left.
    const opaque = changes.filter(([, t]) => t === 'O').map(([p]) => p.slice(1));
    await rename(dir, path.join(this.layersDir, layerId));
    await writeFile(this.metaPath(layerId), JSON.stringify({ format: LAYER_META_FORMAT, opaque }));
    return layerId;
  }

  has(layerId: string): boolean {
    return isImageLayer(layerId) || existsSync(this.metaPath(layerId));
  }

  exportLayer(layerId: string, hint: { bytes?: number } = {}): Readable {
    if (isImageLayer(layerId)) throw new Error(`export: ${layerId} is an image layer (images are built on every host)`);
    return packLayer(this.opts.dialer, this.layerPath(layerId), { ...(hint.bytes !== undefined ? { bytes: hint.bytes } : {}) });
  }

  packProgram(layerId: string): PackProgram {
    if (isImageLayer(layerId)) throw new Error(`export: ${layerId} is an image layer (images are built on every host)`);
    return packProgram(this.layerPath(layerId));
  }

  /** The layer's tree (an image's too) as a plain tar, for an OCI export. */
  tarLayer(layerId: string): Readable {
    return tarTree(this.opts.dialer, this.layerPath(layerId));
  }

  /**
   * Unpacks into a scratch subvolume without a disk limit, scans it (bytes, opaque directories),
   * and renames it into place under the given id; its meta file is written last, so `has` is
   * true only of a complete layer.
   */
  async importLayer(layerId: string, packed: PackSource): Promise<{ bytes: number }> {
    if (this.has(layerId)) {
      if (packed instanceof Readable) packed.destroy();
      return { bytes: 0 };
    }
    const s = await this.createScratch(this.opts.defaultDiskMb, false);
    const dir = this.scratchPath(s);
    try {
      await unpackLayer(this.opts.dialer, packed, path.join(dir, 'tree'));
      const { changes, bytes } = await scanLayer(path.join(dir, 'tree'));
      await this.promote(dir, changes, layerId);
      return { bytes };
    } catch (e) {
      await this.discard(s).catch(() => undefined);
      throw e;
    }
  }

  private metaPath(layerId: string): string {
    return path.join(this.layersDir, `${layerId}.json`);
  }

  async discard(scratch: Scratch): Promise<void> {
    await removeSubvolumeOrTree(this.scratchPath(scratch));
  }

  async squash(layers: readonly string[]): Promise<{ layerId: string; bytes: number }> {
    const s = await this.createScratch(this.opts.defaultDiskMb, false);
    const dir = this.scratchPath(s);
    for (const id of layers) {
      if (isImageLayer(id)) throw new Error('squash: image layers are never squashed');
      await runOk(SBX_STORE, ['apply', this.layerPath(id), path.join(dir, 'tree')]);
    }
    const { bytes, changes } = await scanLayer(path.join(dir, 'tree'));
    return { layerId: await this.promote(dir, changes), bytes };
  }

  private scratchTree(scratch: Scratch): string {
    return path.join(this.scratchPath(scratch), 'tree');
  }

  /** A private directory of a scratch beside its tree (entries move into the tree with a rename), within its disk limit. */
  private scratchStaging(scratch: Scratch): string {
    const dir = path.join(this.scratchPath(scratch), 'staging');
    mkdirSync(dir, { recursive: true });
    chownSync(dir, this.opts.rootId, this.opts.rootId);
    return dir;
  }

  writer(scratch: Scratch): ScratchWriter {
    return new DirWriter(this.scratchTree(scratch), () => this.scratchStaging(scratch));
  }

  async reader(layerId: string): Promise<LayerReader> {
    let r = this.readers.get(layerId);
    if (r) return r;
    let opaque: string[] = [];
    if (!isImageLayer(layerId)) {
      const meta = JSON.parse(readFileSync(this.metaPath(layerId), 'utf8')) as { format: number; opaque: string[] };
      if (meta.format !== LAYER_META_FORMAT) throw new Error(`layer ${layerId}: unknown meta format ${meta.format}`);
      opaque = meta.opaque;
    }
    r = new DirReader(layerId, this.layerPath(layerId), new Set(opaque));
    this.readers.set(layerId, r);
    return r;
  }

  /** Deletes layers (their meta file first, so none is half there), eight at a time; one that fails does not stop the rest. */
  async remove(layerIds: readonly string[]): Promise<void> {
    const ids = layerIds.filter((id) => !isImageLayer(id));
    let failed: unknown = null;
    for (let i = 0; i < ids.length; i += 8) {
      const done = await Promise.allSettled(ids.slice(i, i + 8).map(async (id) => {
        this.readers.delete(id);
        await unlinkQuiet(this.metaPath(id));
        await removeSubvolumeOrTree(path.join(this.layersDir, id));
      }));
      for (const d of done) if (d.status === 'rejected') failed ??= d.reason;
    }
    if (failed) throw failed;
  }

  async sync(): Promise<void> {
    await storeOp('sync', this.opts.root);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.filling;
    for (const s of this.pool.splice(0)) await this.discard(s);
    await closeVolume(this.opts.root, this.opts.imageFile);
  }
}

/** Reads never copy anything up, so a scratch nobody wrote to has an empty tree (no scan needed). */
function untouched(tree: string): boolean {
  return readdirSync(tree).length === 0;
}

/** A subvolume deleted, or a plain tree removed (not crossing into other file systems); an absent one is fine. */
async function removeSubvolumeOrTree(dir: string): Promise<void> {
  await storeOp('delete', dir);
}

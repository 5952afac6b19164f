import type { Readable } from 'node:stream';
import type { PackSource } from '../blobs/types.js';
import type { PackProgram } from '../blobs/pack.js';

/**
 * The snapshotter: this host's mountable file system trees, in the spirit of
 * containerd's snapshotter. Vocabulary:
 *
 * - A **layer** is an immutable tree in overlayfs format (a whiteout hides a
 *   path of the layers below, an opaque directory hides all of a directory
 *   below), named by a layer id. Image layers (store/layer-ids.ts) come from the
 *   image cache; every other layer is the snapshotter's own.
 * - A **scratch** is a fresh, writable tree with a disk limit, where one
 *   sandbox (or a writer without a sandbox) writes. `commit` turns a scratch
 *   into a layer without copying; `discard` drops it.
 * - The snapshotter only *describes* mounts (`mounts`); the runtime performs
 *   them inside the sandbox's own mount namespace. A MountSpec is opaque above
 *   the snapshotter: only the runtime that pairs with it reads it.
 * - Nothing above the snapshotter sees where a layer lives: files are read
 *   through a LayerReader and written through a ScratchWriter, with paths
 *   relative to the tree's root ('' is the root itself, no leading slash).
 *
 * Where a committed layer durably lives beyond this host is the blob store's
 * business (store/blobs): the snapshotter is the host's cache of layers.
 */

/** One path a layer touches. Types: f file, d directory, O opaque directory, l symlink, w whiteout, o other. */
export type ChangeType = 'f' | 'd' | 'O' | 'l' | 'w' | 'o';
export type Change = [path: string, type: ChangeType];

export interface Scratch {
  id: string;
  /** Disk limit in MiB that this scratch enforces. */
  diskMb: number;
}

/** How to mount a stack of layers with a scratch on top, for the runtime (paths relative to `chdir`). */
export interface MountSpec {
  chdir: string;
  /** overlayfs lowerdir value: top layer first. */
  lower: string;
  upper: string;
  work: string;
  merged: string;
}

export interface CommittedLayer {
  layerId: string;
  /** Bytes of file data in the layer. */
  bytes: number;
  /** Every path the layer touches, absolute inside the context, sorted. */
  changes: Change[];
}

/** An entry of a layer as lstat would describe it. A whiteout is its own kind. */
export interface LayerStat {
  kind: 'file' | 'dir' | 'symlink' | 'whiteout' | 'other';
  /** Permission bits and set-id bits (mode & 0o7777). */
  mode: number;
  /** Host ids, as stored (shifted for the sandboxes' user namespace). */
  uid: number;
  gid: number;
  /** Bytes of a file (0 otherwise). */
  size: number;
  /** Device number of a device node. */
  rdev: number;
  atimeMs: number;
  mtimeMs: number;
}

/** Owner, mode and times of an entry a writer makes. */
export interface EntryAttrs {
  mode: number;
  uid: number;
  gid: number;
  atimeMs?: number;
  mtimeMs?: number;
}

/** Reads one committed layer (or an image's tree). Paths are relative to its root. */
export interface LayerReader {
  readonly layerId: string;
  /** Its opaque directories (relative paths). */
  readonly opaque: ReadonlySet<string>;
  /**
   * The entry at `rel`, null when there is none (or a path through a non-directory).
   * Throws an Error with code ENAMETOOLONG for paths the host cannot reach.
   */
  stat(rel: string): LayerStat | null;
  /** Names in a directory of the layer ([] when it is not one). */
  list(rel: string): string[];
  readlink(rel: string): string;
  /** A file's bytes whole (small files: the files API reads those at once). */
  readAll(rel: string): Buffer;
  /** A file's bytes from `start` to `end` inclusive (default: all of it), as a stream. */
  stream(rel: string, range?: { start: number; end: number }): Readable;
}

/**
 * Writes into a scratch without a sandbox: the files API, merges, tar uploads.
 * Directories are made as given (an existing one gets the attributes again);
 * a full disk limit throws an Error with code EDQUOT or ENOSPC.
 */
export interface ScratchWriter {
  mkdir(rel: string, attrs: EntryAttrs): void;
  writeFile(rel: string, body: Readable, attrs: EntryAttrs): Promise<void>;
  symlink(rel: string, target: string, attrs: EntryAttrs): void;
  /** A whiteout: the path is deleted over the layers below. */
  whiteout(rel: string): Promise<void>;
  /** Marks a directory the writer made opaque. */
  setOpaque(rel: string): Promise<void>;
  /** Copies a file of a layer (bytes, owner, mode, times; `attrs` instead of its owner, mode and times when given) to `to`. */
  copyFile(from: LayerReader, rel: string, to: string, attrs?: EntryAttrs): Promise<void>;
  /**
   * A private directory on the scratch's file system and within its limit,
   * never part of the layer, for a helper to fill (the runtime's tar): a mount
   * description, as MountSpec is.
   */
  staging(): { source: string };
  /** What the staging directory holds, sorted (paths relative to it, with a leading slash). */
  stagedChanges(): Promise<Change[]>;
  stagedStat(rel: string): LayerStat;
  /** Moves an entry from the staging directory into the tree (a rename: no copy). */
  adopt(stagedRel: string, to: string): void;
  /**
   * The tree itself, for a helper that fills a fresh scratch whole (the runtime's tar unpacking
   * an OCI layer or a build context): a mount description, as `staging` is. Nothing else
   * writes to the scratch meanwhile.
   */
  tree(): { source: string };
}

export interface Snapshotter {
  /** Makes the store ready (mounting its file system if needed). */
  open(): Promise<void>;
  /**
   * Deletes scratch space and every stored layer `known` does not name (crash recovery, at start).
   * It asks about the layers it holds a batch at a time, so its memory does not grow with the store.
   */
  recover(known: (ids: string[]) => Promise<Set<string>>): Promise<{ scratch: number; layers: number }>;
  prepare(options: { diskMb: number }): Promise<Scratch>;
  /**
   * The mount of `layers` (bottom first) under `scratch`, for the runtime. Asynchronous because
   * a snapshotter that caches layers (cluster mode) first fetches those this host lacks.
   */
  mounts(layers: readonly string[], scratch: Scratch): Promise<MountSpec>;
  /**
   * Makes `layers` present on this host ahead of `mounts`, which then only waits for them: a
   * snapshotter that caches layers starts fetching those it lacks. Absent where all are here.
   */
  ensure?(layers: readonly string[]): Promise<void>;
  /** Turns the scratch into a layer; null (and the scratch dropped) when nothing was written. */
  commit(scratch: Scratch): Promise<CommittedLayer | null>;
  discard(scratch: Scratch): Promise<void>;
  /**
   * Turns a scratch that holds an OCI layer as its archive spells it (filled through the
   * writer's `tree`) into a layer: an entry `.wh.NAME` becomes a whiteout of NAME (or is only
   * dropped when NAME is in the layer too: a whiteout hides lower layers only), and
   * `.wh..wh..opq` makes its directory opaque; both names are removed. Unlike `commit`, an
   * empty scratch is a layer too (an OCI layer may change nothing). Its id is a new imported
   * layer's (store/layer-ids.ts), or `layerId` when given (a context archive's layer, kept under
   * the id its versions name): a layer of that id already stored fails it (code ENOTEMPTY or
   * EEXIST), and the scratch is left to the caller.
   */
  commitImport(scratch: Scratch, layerId?: string): Promise<CommittedLayer>;
  /** Drops a scratch without making a layer and says how many bytes of file data it held. */
  release(scratch: Scratch): Promise<number>;
  /** Builds one layer equal to `layers` (bottom first) stacked; none of them may be an image. */
  squash(layers: readonly string[]): Promise<{ layerId: string; bytes: number }>;
  /** Reads a layer (cached: layers are immutable). */
  reader(layerId: string): Promise<LayerReader>;
  /** Writes into a scratch without a sandbox. */
  writer(scratch: Scratch): ScratchWriter;
  /** Deletes layers (image layers are not the snapshotter's: they are skipped). */
  remove(layerIds: readonly string[]): Promise<void>;
  /** Makes every committed layer durable (survives power loss). */
  sync(): Promise<void>;
  /** Unmounts what `open` mounted. */
  close(): Promise<void>;
}

/**
 * A snapshotter whose layers can leave this host and come back as packed blobs
 * (store/blobs/pack.ts, LAYER_PACK_FORMAT): what cluster mode needs of the local snapshotter
 * (store/snapshotter/cluster/). Image layers never travel: every host builds its images.
 */
export interface LayerTransfer {
  /** Whether the layer is complete on this host (image layers: always). */
  has(layerId: string): boolean;
  /**
   * The layer packed (a stream that fails, never ends cleanly, when packing fails); `hint.bytes`:
   * its bytes of file data, where the caller knows them (store/blobs/pack.ts, PackOptions).
   */
  exportLayer(layerId: string, hint?: { bytes?: number }): Readable;
  /**
   * The same pack as the program that makes it, for a caller that runs it itself (an export
   * writing a layer straight into its client's connection); absent where no local tree is packed.
   */
  packProgram?(layerId: string): PackProgram;
  /**
   * Makes the layer from its pack (a stream, where a program can fetch it, or a local file with
   * its digest: store/blobs/pack.ts), under the same id; nothing of it stays when it fails.
   */
  importLayer(layerId: string, packed: PackSource): Promise<{ bytes: number }>;
}

/**
 * A snapshotter that reads any layer's tree (image layers too) as a plain tar in overlayfs form
 * (store/blobs/pack.ts, `tarTree`): what an OCI export starts from (engine/transfer/oci.ts).
 */
export interface LayerTarring {
  tarLayer(layerId: string): Readable;
}

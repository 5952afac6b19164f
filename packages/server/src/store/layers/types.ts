/**
 * The layer store: where file system trees live, in the spirit of containerd's
 * snapshotter. Vocabulary:
 *
 * - A **layer** is an immutable directory tree in overlayfs format (whiteouts
 *   are 0/0 character devices, opaque directories carry the overlay xattr),
 *   named by a layer id. Image layers (`image:NAME:TAG`) live in the image
 *   cache; every other layer lives in the store.
 * - A **scratch** is a fresh, writable pair of overlay upper and work
 *   directories with a disk limit, where one sandbox writes. `commit` turns a
 *   scratch into a layer without copying; `discard` drops it.
 * - The store only *describes* mounts (`mountSpec`); the runtime performs them
 *   inside the sandbox's own mount namespace.
 */

/** One path a layer touches. Types: f file, d directory, O opaque directory, l symlink, w whiteout, o other. */
export type ChangeType = 'f' | 'd' | 'O' | 'l' | 'w' | 'o';
export type Change = [path: string, type: ChangeType];

export interface Scratch {
  id: string;
  /** Disk limit in MiB that this scratch enforces. */
  diskMb: number;
}

/** How to mount a stack of layers with a scratch on top (paths relative to `chdir`). */
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

/** How a file-reading view sees a layer: its tree and its opaque directories (relative paths). */
export interface ViewLayer {
  root: string;
  opaque: ReadonlySet<string>;
}

export interface LayerStore {
  /** Makes the store ready (mounting its file system if needed). */
  open(): Promise<void>;
  /** Deletes scratch space and every stored layer not in `keep` (crash recovery, at start). */
  recover(keep: ReadonlySet<string>): Promise<{ scratch: number; layers: number }>;
  prepare(options: { diskMb: number }): Promise<Scratch>;
  /** The mount of `layers` (bottom first) under `scratch`. */
  mountSpec(layers: readonly string[], scratch: Scratch): MountSpec;
  /** Turns the scratch into a layer; null (and the scratch dropped) when nothing was written. */
  commit(scratch: Scratch): Promise<CommittedLayer | null>;
  discard(scratch: Scratch): Promise<void>;
  /** Drops a scratch without making a layer and says how many bytes of file data it held. */
  release(scratch: Scratch): Promise<number>;
  /** Builds one layer equal to `layers` (bottom first) stacked; none of them may be an image. */
  squash(layers: readonly string[]): Promise<{ layerId: string; bytes: number }>;
  /** The directory of a layer's tree on this host. */
  layerPath(layerId: string): string;
  /** A layer as a view reads it (cached: layers are immutable). */
  viewLayer(layerId: string): Promise<ViewLayer>;
  /** The tree of a scratch, for writers that build a layer without a sandbox. */
  scratchTree(scratch: Scratch): string;
  /**
   * A private directory of a scratch: on the tree's file system (entries move
   * into the tree with a rename) and within its disk limit, never part of the layer.
   */
  scratchStaging(scratch: Scratch): string;
  remove(layerId: string): Promise<void>;
  /** Makes every committed layer durable (survives power loss). */
  sync(): Promise<void>;
  /** Unmounts what `open` mounted. */
  close(): Promise<void>;
}

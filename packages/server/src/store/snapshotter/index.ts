export type {
  Change, ChangeType, CommittedLayer, EntryAttrs, LayerReader, LayerStat, MountSpec, Scratch, ScratchWriter, Snapshotter,
} from './types.js';
export { BtrfsSnapshotter } from './btrfs/btrfs-snapshotter.js';
export { MemorySnapshotter } from './memory/memory-snapshotter.js';

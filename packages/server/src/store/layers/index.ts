export type { Change, ChangeType, CommittedLayer, LayerStore, MountSpec, Scratch } from './types.js';
export { BtrfsLayerStore } from './btrfs/btrfs-store.js';
export { scanLayer } from './scan.js';

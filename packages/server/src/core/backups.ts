import type { BlobStore } from '../store/blobs/types.js';
import type { MachineRow, SnapshotRow, StoredFile } from '../store/metadata/types.js';

/**
 * Machines' files in a server backup (engine/transfer/backup.ts asks the machines for them;
 * restore.ts puts them back): each file a blob of the backup's target, packed as cluster mode
 * stows them (machines/storage/stowage.ts). A machine's `disk` is its chain, top first.
 */
export interface BackedUpMachine {
  id: string;
  /** `hibernated` (with `ram` and `state`, or `cold`: without memory, booted from its disk at its wake) or `stopped` (its disk only). */
  state: 'hibernated' | 'stopped';
  cold?: boolean;
  ram?: StoredFile;
  deviceState?: StoredFile;
  disk: StoredFile[];
}

export interface BackedUpSnapshot {
  id: string;
  ram: StoredFile;
  deviceState: StoredFile;
  disk: StoredFile[];
}

export interface MachineFilesBackup {
  machines: BackedUpMachine[];
  snapshots: BackedUpSnapshot[];
  /** Machines and snapshots of the metadata copy whose files are not in the backup, and why (running ones; one deleted or woken meanwhile). */
  left: { id: string; why: string }[];
}

/** What the machines give a backup (the engine's peer). */
export interface MachineBackups {
  /**
   * Stores into `target` the files of the hibernated and stopped machines and of the snapshots
   * among `machines` and `snapshots` (rows of the backup's metadata copy), each under the
   * machine's lifecycle lock, skipping (into `left`) those that changed since the copy.
   */
  store(target: BlobStore, machines: readonly MachineRow[], snapshots: readonly SnapshotRow[], progress?: (done: number, total: number) => void): Promise<MachineFilesBackup>;
}

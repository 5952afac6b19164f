import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BtrfsSnapshotter } from '../packages/server/src/store/snapshotter/btrfs/btrfs-snapshotter.ts';
import { Dialer } from '../packages/server/src/util/dialer.ts';

/** A btrfs snapshotter over `dir` (its volume a 2 GB file there), as the store tests use it; not opened. */
export const btrfsStore = (dir: string, poolSize = 1) => new BtrfsSnapshotter({
  root: path.join(dir, 'store'), imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: () => '/nonexistent', defaultDiskMb: 16, poolSize, rootId: 100_000,
  dialer: new Dialer(path.join(dir, 'streams')),
});

/** A new temporary directory, its store's root in it, and a btrfs snapshotter over them (not opened). */
export function tempBtrfsStore(poolSize = 1): { dir: string; root: string; store: BtrfsSnapshotter } {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-store-'));
  return { dir, root: path.join(dir, 'store'), store: btrfsStore(dir, poolSize) };
}

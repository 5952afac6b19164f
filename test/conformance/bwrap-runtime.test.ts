import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { imageInfo, imageRootfs, loadConfig } from '../../packages/server/src/index.ts';
import { BwrapRuntime, cgroupDriver } from '../../packages/server/src/runtime/index.ts';
import { BtrfsSnapshotter } from '../../packages/server/src/store/snapshotter/btrfs/btrfs-snapshotter.ts';
import { runtimeConformance } from './runtime.ts';
import { Dialer } from '../../packages/server/src/util/dialer.ts';

runtimeConformance('bwrap runtime', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-runtime-'));
  chmodSync(dir, 0o711); // passable by the sandboxes' root, as a server's home is
  const cache = loadConfig().cache;
  const dialer = new Dialer(path.join(dir, 'streams'));
  const snapshotter = new BtrfsSnapshotter({
    root: path.join(dir, 'store'), imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: (id) => imageRootfs(cache, id),
    defaultDiskMb: 64, poolSize: 0, rootId: 100_000, dialer,
  });
  await snapshotter.open();
  const runtime = new BwrapRuntime(cgroupDriver(`conf${process.pid}`), { dialer, helpers: path.join(dir, 'helpers') });
  return {
    runtime, snapshotter, image: imageInfo(cache, 'debian').layerId, imageFile: '/etc/debian_version',
    done: async () => { await runtime.close(); await snapshotter.close(); rmSync(dir, { recursive: true, force: true }); },
  };
});

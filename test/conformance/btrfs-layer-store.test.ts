import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BtrfsLayerStore } from '../../packages/server/src/store/layers/btrfs/btrfs-store.ts';
import { cleanup, layerStoreConformance } from './layer-store.ts';

layerStoreConformance('btrfs layer store', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-store-'));
  const root = path.join(dir, 'store');
  const store = new BtrfsLayerStore({
    root, imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: () => '/nonexistent', defaultDiskMb: 16, poolSize: 1, rootId: 100_000,
  });
  await store.open();
  return {
    store,
    upperOf: (s) => path.join(root, 'scratch', s.id, 'tree'),
    done: async () => { await store.close(); cleanup(dir); },
  };
});

import assert from 'node:assert/strict';
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
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

test('btrfs layer store: a format-1 store (host ids) is shifted once on open', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-store-'));
  const root = path.join(dir, 'store');
  const make = () => new BtrfsLayerStore({
    root, imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: () => '/nonexistent', defaultDiskMb: 16, poolSize: 0, rootId: 100_000,
  });
  let store = make();
  try {
    await store.open();
    const s = await store.prepare({ diskMb: 16 });
    const tree = store.scratchTree(s);
    writeFileSync(path.join(tree, 'a'), 'a');
    writeFileSync(path.join(tree, 'b'), 'b');
    chownSync(path.join(tree, 'a'), 0, 0);
    chownSync(path.join(tree, 'b'), 1000, 1000);
    chmodSync(path.join(tree, 'b'), 0o4755);
    const layer = (await store.commit(s))!;
    rmSync(path.join(root, 'format')); // inside the store's own file system: while it is mounted
    await store.close();
    for (let open = 0; open < 2; open++) {
      store = make();
      await store.open();
      const [a, b] = ['a', 'b'].map((n) => statSync(path.join(store.layerPath(layer.layerId), n)));
      assert.deepEqual([a.uid, a.gid, b.uid, b.gid], [100_000, 100_000, 101_000, 101_000], `open ${open + 1}: shifted once`);
      assert.equal(b.mode & 0o7777, 0o4755, 'set-id bits survive');
      assert.equal(readFileSync(path.join(root, 'format'), 'utf8'), '2\n');
      await store.close();
    }
  } finally {
    cleanup(dir);
  }
});

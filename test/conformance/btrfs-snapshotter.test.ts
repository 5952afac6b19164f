import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BtrfsSnapshotter } from '../../packages/server/src/store/snapshotter/btrfs/btrfs-snapshotter.ts';
import { snapshotterConformance } from './snapshotter.ts';
import { Dialer } from '../../packages/server/src/util/dialer.ts';

const make = (dir: string, poolSize = 1) => new BtrfsSnapshotter({
  root: path.join(dir, 'store'), imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: () => '/nonexistent', defaultDiskMb: 16, poolSize, rootId: 100_000,
  dialer: new Dialer(path.join(dir, 'streams')),
});

snapshotterConformance('btrfs snapshotter', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-store-'));
  const store = make(dir);
  await store.open();
  return { store, done: async () => { await store.close(); rmSync(dir, { recursive: true, force: true }); } };
});

test('btrfs snapshotter: a format-1 store (host ids) is shifted once on open', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-store-'));
  const root = path.join(dir, 'store');
  let store = make(dir, 0);
  try {
    await store.open();
    const s = await store.prepare({ diskMb: 16 });
    const w = store.writer(s);
    await w.writeFile('a', Readable.from([Buffer.from('a')]), { mode: 0o644, uid: 0, gid: 0 });
    await w.writeFile('b', Readable.from([Buffer.from('b')]), { mode: 0o4755, uid: 1000, gid: 1000 });
    const layer = (await store.commit(s))!;
    rmSync(path.join(root, 'format')); // inside the store's own file system: while it is mounted
    await store.close();
    for (let open = 0; open < 2; open++) {
      store = make(dir, 0);
      await store.open();
      const r = await store.reader(layer.layerId);
      const [a, b] = ['a', 'b'].map((n) => r.stat(n)!);
      assert.deepEqual([a.uid, a.gid, b.uid, b.gid], [100_000, 100_000, 101_000, 101_000], `open ${open + 1}: shifted once`);
      assert.equal(b.mode, 0o4755, 'set-id bits survive');
      assert.equal(readFileSync(path.join(root, 'format'), 'utf8'), '2\n');
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

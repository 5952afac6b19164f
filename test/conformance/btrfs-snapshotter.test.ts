import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import path from 'node:path';
import { snapshotterConformance } from './snapshotter.ts';
import { SBX_STORE } from '../../packages/server/src/util/native.ts';
import { run } from '../../packages/server/src/util/proc.ts';
import { btrfsStore as make, tempBtrfsStore } from '../btrfs-store.ts';

snapshotterConformance('btrfs snapshotter', async () => {
  const { dir, store } = tempBtrfsStore();
  await store.open();
  return { store, done: async () => { await store.close(); rmSync(dir, { recursive: true, force: true }); } };
});

test('btrfs snapshotter: a format-1 store (host ids) is shifted once on open', async () => {
  const made = tempBtrfsStore(0);
  const { dir, root } = made;
  let store = made.store;
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

test('btrfs snapshotter: scratches come with their directories and limit; sbx-store limit refuses a directory that is no subvolume, and a scratch it cannot finish is not left', async () => {
  const { dir, root, store } = tempBtrfsStore(0);
  try {
    await store.open();
    const s = await store.prepare({ diskMb: 16 });
    const made = path.join(root, 'scratch', s.id);
    assert.equal(statSync(made).ino, 256, 'a subvolume');
    assert.deepEqual(readdirSync(made).sort(), ['merged', 'tree', 'work']);
    assert.equal(statSync(path.join(made, 'tree')).uid, 100_000);
    // A plain directory of the store: its limit would be the whole volume's.
    mkdirSync(path.join(root, 'plain'));
    const limit = await run(SBX_STORE, ['limit', path.join(root, 'plain'), '16']);
    assert.notEqual(limit.code, 0);
    assert.match(limit.stderr, /not a subvolume/);
    // A root id out of range is refused before anything is made; a name already taken fails the create.
    assert.equal((await run(SBX_STORE, ['scratch', path.join(root, 'scratch', 'x'), String(2 ** 32), '16'])).code, 2);
    assert.ok(!existsSync(path.join(root, 'scratch', 'x')));
    assert.notEqual((await run(SBX_STORE, ['scratch', made, '100000', '16'])).code, 0);
    await store.discard(s);
    // Without quotas the limit cannot be set: the subvolume made before it goes again.
    assert.equal((await run('btrfs', ['quota', 'disable', root])).code, 0);
    const half = await run(SBX_STORE, ['scratch', path.join(root, 'scratch', 'y'), '100000', '16']);
    assert.notEqual(half.code, 0);
    assert.match(half.stderr, /qgroup limit/);
    assert.ok(!existsSync(path.join(root, 'scratch', 'y')), 'no half-made scratch is left');
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { isImportedLayer } from '../../packages/server/src/store/layer-ids.ts';
import type { EntryAttrs, LayerReader, Scratch, ScratchWriter, Snapshotter } from '../../packages/server/src/store/snapshotter/types.ts';

const ROOT: EntryAttrs = { mode: 0o755, uid: 100_000, gid: 100_000 };
const FILE: EntryAttrs = { mode: 0o644, uid: 100_000, gid: 100_000 };
const text = (s: string) => Readable.from([Buffer.from(s)]);
const read = async (r: LayerReader, rel: string) => {
  const chunks: Buffer[] = [];
  for await (const c of r.stream(rel)) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString();
};

/**
 * The cases every Snapshotter backend must pass, through the interface only:
 * a ScratchWriter stands for a sandbox's writes (the runtime that pairs with a
 * backend exercises its mounts), a LayerReader for what the files API reads.
 */
export function snapshotterConformance(name: string, make: () => Promise<{ store: Snapshotter; done: () => Promise<void> }>) {
  const withStore = (title: string, body: (s: Snapshotter) => Promise<void>) => test(`${name}: ${title}`, async () => {
    const { store, done } = await make();
    try { await body(store); } finally { await done(); }
  });
  const commitWith = async (store: Snapshotter, fill: (w: ScratchWriter) => Promise<void>) => {
    const s = await store.prepare({ diskMb: 16 });
    await fill(store.writer(s));
    return (await store.commit(s))!;
  };

  withStore('an untouched scratch commits to nothing', async (store) => {
    assert.equal(await store.commit(await store.prepare({ diskMb: 16 })), null);
  });

  withStore('release drops a scratch and tells what it held', async (store) => {
    assert.equal(await store.release(await store.prepare({ diskMb: 16 })), 0);
    const s = await store.prepare({ diskMb: 16 });
    await store.writer(s).writeFile('five', text('12345'), FILE);
    assert.equal(await store.release(s), 5);
  });

  withStore('commit lists every path with its type and the bytes written; the reader sees them', async (store) => {
    const layer = await commitWith(store, async (w) => {
      w.mkdir('root', ROOT);
      await w.writeFile('root/a', text('hello'), FILE);
      w.symlink('link', '/etc/passwd', FILE);
      await w.whiteout('gone');
      w.mkdir('opaque', ROOT);
      await w.setOpaque('opaque');
    });
    assert.equal(layer.bytes, 5);
    assert.deepEqual(layer.changes, [['/gone', 'w'], ['/link', 'l'], ['/opaque', 'O'], ['/root', 'd'], ['/root/a', 'f']]);
    const r = await store.reader(layer.layerId);
    assert.equal(await read(r, 'root/a'), 'hello');
    assert.equal(r.readAll('root/a').toString(), 'hello');
    assert.equal(r.readlink('link'), '/etc/passwd');
    assert.deepEqual([r.stat('gone')?.kind, r.stat('root')?.kind, r.stat('root/a')?.size, r.stat('nope'), r.stat('root/a/below')], ['whiteout', 'dir', 5, null, null]);
    assert.deepEqual([...r.opaque], ['opaque']);
    assert.deepEqual(r.list('').sort(), ['gone', 'link', 'opaque', 'root']);
    assert.deepEqual(r.list('root/a'), [], 'a file lists nothing');
    const st = r.stat('root/a')!;
    assert.deepEqual([st.mode, st.uid, st.gid], [0o644, 100_000, 100_000]);
    const part: Buffer[] = [];
    for await (const c of r.stream('root/a', { start: 1, end: 3 })) part.push(c as Buffer);
    assert.equal(Buffer.concat(part).toString(), 'ell');
  });

  withStore('a writer keeps the attributes it is given, and copies files of layers', async (store) => {
    const dirAttrs = { mode: 0o700, uid: 100_001, gid: 100_002, atimeMs: 1_000_000, mtimeMs: 2_000_000 };
    const a = await commitWith(store, async (w) => {
      w.mkdir('d', dirAttrs);
      await w.writeFile('d/f', text('data'), { mode: 0o600, uid: 101_000, gid: 101_000 });
      w.mkdir('d', dirAttrs); // its times again: the new file changed them
    });
    const ra = await store.reader(a.layerId);
    const d = ra.stat('d')!;
    assert.deepEqual([d.mode, d.uid, d.gid, Math.round(d.mtimeMs)], [0o700, 100_001, 100_002, 2_000_000]);
    const b = await commitWith(store, async (w) => {
      w.mkdir('copy', ROOT);
      await w.copyFile(ra, 'd/f', 'copy/f');
    });
    const f = (await store.reader(b.layerId)).stat('copy/f')!;
    assert.deepEqual([f.mode, f.uid, f.size], [0o600, 101_000, 4]);
    assert.equal((await store.reader(b.layerId)).readAll('copy/f').toString(), 'data');
    const c = await commitWith(store, async (w) => { await w.copyFile(ra, 'd/f', 'owned', { mode: 0o640, uid: 100_033, gid: 100_034 }); });
    const owned = (await store.reader(c.layerId)).stat('owned')!;
    assert.deepEqual([owned.mode, owned.uid, owned.gid, owned.size], [0o640, 100_033, 100_034, 4], 'a copy takes the attributes it is given');
  });

  withStore('commitImport turns OCI whiteouts into the store\'s; an empty import is a layer too', async (store) => {
    const s = await store.prepare({ diskMb: 16 });
    const w = store.writer(s);
    assert.equal(typeof w.tree().source, 'string');
    await w.writeFile('.wh.gone', text(''), FILE);
    w.mkdir('d', ROOT);
    await w.writeFile('d/.wh..wh..opq', text(''), FILE);
    await w.writeFile('d/keep', text('k'), FILE);
    await w.writeFile('d/.wh.keep', text(''), FILE); // hides lower layers only: the layer's own keep stays
    w.mkdir('e', ROOT);
    await w.writeFile('e/.wh.x', text(''), FILE);
    await w.writeFile('e/.wh...', text(''), FILE); // would name the parent: dropped
    const layer = await store.commitImport(s);
    assert.ok(isImportedLayer(layer.layerId), layer.layerId);
    assert.deepEqual(layer.changes, [['/d', 'O'], ['/d/keep', 'f'], ['/e', 'd'], ['/e/x', 'w'], ['/gone', 'w']]);
    assert.equal(layer.bytes, 1);
    const r = await store.reader(layer.layerId);
    assert.deepEqual([...r.opaque], ['d']);
    assert.deepEqual([r.stat('gone')?.kind, r.stat('e/x')?.kind], ['whiteout', 'whiteout']);
    assert.deepEqual(r.list('d'), ['keep']);
    const empty = await store.commitImport(await store.prepare({ diskMb: 16 }));
    assert.deepEqual([empty.changes, empty.bytes], [[], 0]);
    assert.deepEqual((await store.reader(empty.layerId)).list(''), []);
    assert.notEqual(empty.layerId, layer.layerId);
    // Under a given id (a context archive's layer): the layer is found by it.
    const named = await store.prepare({ diskMb: 16 });
    await store.writer(named).writeFile('n', text('n'), FILE);
    const given = 'l_conformance' + Math.random().toString(36).slice(2, 10);
    assert.equal((await store.commitImport(named, given)).layerId, given);
    assert.deepEqual((await store.reader(given)).list(''), ['n']);
    // Another scratch under the same id is refused; the stored layer stays as it was.
    const again = await store.prepare({ diskMb: 16 });
    await store.writer(again).writeFile('m', text('m'), FILE);
    await assert.rejects(store.commitImport(again, given), (e: NodeJS.ErrnoException) => e.code === 'ENOTEMPTY' || e.code === 'EEXIST');
    await store.discard(again);
    assert.deepEqual((await store.reader(given)).list(''), ['n']);
  });

  withStore('staged entries move into the tree; the staging directory is not part of the layer', async (store) => {
    const s = await store.prepare({ diskMb: 16 });
    const w = store.writer(s);
    assert.equal(typeof w.staging().source, 'string');
    assert.deepEqual(await w.stagedChanges(), []);
    await store.discard(s);
  });

  withStore('a write past the disk limit fails with EDQUOT or ENOSPC', async (store) => {
    const s = await store.prepare({ diskMb: 1 });
    const big = Readable.from([Buffer.alloc(3 << 20, 1)]);
    await assert.rejects(store.writer(s).writeFile('big', big, FILE), (e: NodeJS.ErrnoException) => e.code === 'EDQUOT' || e.code === 'ENOSPC');
    await store.discard(s);
  });

  withStore('squash stacks layers as overlayfs would', async (store) => {
    const a = await commitWith(store, async (w) => { w.mkdir('d', ROOT); await w.writeFile('d/x', text('x'), FILE); await w.writeFile('f', text('1'), FILE); });
    const b = await commitWith(store, async (w) => { await w.whiteout('d'); await w.writeFile('f', text('2'), FILE); });
    const c = await commitWith(store, async (w) => { w.mkdir('d', ROOT); await w.writeFile('d/y', text('y'), FILE); });
    const squashed = await store.squash([a.layerId, b.layerId, c.layerId]);
    assert.equal(squashed.bytes, 2);
    const r = await store.reader(squashed.layerId);
    assert.equal(r.readAll('f').toString(), '2');
    assert.deepEqual(r.list('d'), ['y']);
    assert.ok(r.opaque.has('d'), 'a directory over a whiteout must not merge with lower layers');
  });

  withStore('remove deletes a layer; recover drops scratch space and unreferenced layers only', async (store) => {
    const kept = (await commitWith(store, async (w) => { await w.writeFile('k', text('k'), FILE); })).layerId;
    const lost = (await commitWith(store, async (w) => { await w.writeFile('l', text('l'), FILE); })).layerId;
    const gone = (await commitWith(store, async (w) => { await w.writeFile('g', text('g'), FILE); })).layerId;
    await store.remove([gone]);
    await assert.rejects(store.reader(gone).then((x) => x.readAll('g')), 'a removed layer is gone');
    const pending: Scratch = await store.prepare({ diskMb: 16 });
    const r = await store.recover(async (ids) => new Set(ids.filter((id) => id === kept)));
    assert.equal(r.layers, 1);
    assert.ok(r.scratch >= 1);
    assert.equal((await store.reader(kept)).readAll('k').toString(), 'k');
    await assert.rejects(store.reader(lost).then((x) => x.readAll('l')), 'the unreferenced layer is gone');
    await assert.rejects(store.commit(pending), 'the scratch is gone');
  });
}

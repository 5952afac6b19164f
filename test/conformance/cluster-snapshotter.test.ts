import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import pino from 'pino';
import { MemoryBlobStore } from '../../packages/server/src/store/blobs/memory/memory-blobs.ts';
import type { BlobStore } from '../../packages/server/src/store/blobs/types.ts';
import { BtrfsSnapshotter } from '../../packages/server/src/store/snapshotter/btrfs/btrfs-snapshotter.ts';
import { ClusterSnapshotter, type LayerIndex } from '../../packages/server/src/store/snapshotter/cluster/cluster-snapshotter.ts';
import type { LayerReader } from '../../packages/server/src/store/snapshotter/types.ts';
import { snapshotterConformance } from './snapshotter.ts';
import { Dialer } from '../../packages/server/src/util/dialer.ts';
import { startS3 } from '../s3.ts';

// The cluster snapshotter over real btrfs stores (one per "worker") and one blob store; the
// index of layers' blobs is a Map here (Postgres's table is exercised by test/cluster.test.ts).
const log = pino({ level: 'silent' });
const FILE = { mode: 0o644, uid: 100_000, gid: 100_000 };
const DIR = { mode: 0o755, uid: 100_000, gid: 100_000 };
const text = (s: string) => Readable.from([Buffer.from(s)]);
const read = async (r: LayerReader, rel: string) => {
  const chunks: Buffer[] = [];
  for await (const c of r.stream(rel)) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString();
};

class MapIndex implements LayerIndex {
  readonly rows = new Map<string, { digest: string; size: number; format: number }>();
  async recordBlob(b: { layerId: string; digest: string; size: number; format: number }) { if (!this.rows.has(b.layerId)) this.rows.set(b.layerId, b); }
  async blobsOf(ids: readonly string[]) { return new Map(ids.filter((id) => this.rows.has(id)).map((id) => [id, this.rows.get(id)!])); }
  async dropBlobs(ids: readonly string[]) { for (const id of ids) this.rows.delete(id); }
}

interface World { blobs: BlobStore; index: MapIndex; pinned: Set<string>; worker(maxBytes?: number): Promise<ClusterSnapshotter>; done(): Promise<void> }

async function world(blobs: BlobStore = new MemoryBlobStore()): Promise<World> {
  const dirs: string[] = [];
  const stores: ClusterSnapshotter[] = [];
  const index = new MapIndex();
  const pinned = new Set<string>();
  return {
    blobs, index, pinned,
    async worker(maxBytes = 1 << 30) {
      const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-cluster-store-'));
      dirs.push(dir);
      const local = new BtrfsSnapshotter({
        root: path.join(dir, 'store'), imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: () => '/nonexistent', defaultDiskMb: 16, poolSize: 1, rootId: 100_000,
        dialer: new Dialer(path.join(dir, 'streams')),
      });
      const s = new ClusterSnapshotter({ local, blobs, index, maxBytes, inUse: (id) => pinned.has(id), log });
      await s.open();
      stores.push(s);
      return s;
    },
    async done() {
      for (const s of stores) await s.close();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
  };
}

snapshotterConformance('cluster snapshotter (btrfs + memory blobs)', async () => {
  const w = await world();
  return { store: await w.worker(), done: () => w.done() };
});

async function commitFiles(s: ClusterSnapshotter, files: Record<string, string>) {
  const scratch = await s.prepare({ diskMb: 16 });
  const w = s.writer(scratch);
  for (const [name, body] of Object.entries(files)) await w.writeFile(name, text(body), FILE);
  return (await s.commit(scratch))!;
}

/** An S3 store (test/s3.ts) whose `get` calls are counted: a blob it can `locate` is fetched by curl, never through `get`. */
async function s3World(): Promise<World & { gets: () => number }> {
  const s3 = await startS3();
  const store = s3.store({ prefix: 'cluster' });
  let gets = 0;
  const get = store.get.bind(store);
  store.get = (...args: Parameters<typeof store.get>) => { gets++; return get(...args); };
  const w = await world(store);
  return { ...w, gets: () => gets, done: async () => { await w.done(); await s3.stop(); } };
}

for (const [blobs, make] of [['memory blobs', world], ['an S3 store, fetched by URL', s3World]] as const) {
  test(`cluster snapshotter (${blobs}): a layer committed on one worker is read on another, whiteouts and opaque directories included`, async () => {
    const w = await make();
    try {
      const [a, b] = [await w.worker(), await w.worker()];
      const scratch = await a.prepare({ diskMb: 16 });
      const wr = a.writer(scratch);
      wr.mkdir('d', DIR);
      await wr.writeFile('d/f', text('hello'), { ...FILE, mode: 0o4755 });
      wr.symlink('link', 'd/f', FILE);
      await wr.whiteout('gone');
      wr.mkdir('o', DIR);
      await wr.setOpaque('o');
      const layer = (await a.commit(scratch))!;
      assert.ok(w.index.rows.has(layer.layerId), 'its blob is recorded before commit returns');
      assert.ok(await w.blobs.stat(w.index.rows.get(layer.layerId)!.digest));
      const r = await b.reader(layer.layerId);
      assert.equal(await read(r, 'd/f'), 'hello');
      assert.equal(r.stat('d/f')!.mode, 0o4755);
      assert.equal(r.stat('d/f')!.uid, 100_000);
      assert.equal(r.readlink('link'), 'd/f');
      assert.equal(r.stat('gone')!.kind, 'whiteout');
      assert.deepEqual([...r.opaque], ['o']);
      assert.equal(b.fetched, 1);
      if ('gets' in w) assert.equal(w.gets(), 0, 'fetched by curl, not through the store\'s get');
    } finally {
      await w.done();
    }
  });
}

test('cluster snapshotter: a blob gone from the object store fails the fetch by URL as unavailable (the store\'s 404 said) and keeps nothing', async () => {
  const w = await s3World();
  try {
    const [a, b] = [await w.worker(), await w.worker()];
    const layer = await commitFiles(a, { f: 'x' });
    await w.blobs.delete(w.index.rows.get(layer.layerId)!.digest);
    await assert.rejects(b.reader(layer.layerId), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'unavailable', e.message);
      assert.match(e.message, /fetching layer .* failed: .*returned error: 404/);
      return true;
    });
    assert.equal(b.fetched, 0);
    assert.equal(w.gets(), 0, 'fetched by curl');
    assert.deepEqual(b.usage(), { bytes: 0, layers: 0 }, 'nothing of it cached');
    await assert.rejects(b.reader(layer.layerId), (e: Error & { code?: string }) => e.code === 'unavailable', 'nor taken for present afterwards');
  } finally {
    await w.done();
  }
});

test('cluster snapshotter: concurrent requests for the same missing layers fetch each once', async () => {
  const w = await world();
  try {
    const [a, b] = [await w.worker(), await w.worker()];
    const layers = [];
    for (let i = 0; i < 4; i++) layers.push((await commitFiles(a, { [`f${i}`]: `${i}` })).layerId);
    const scratches = await Promise.all([1, 2, 3, 4, 5].map(() => b.prepare({ diskMb: 16 })));
    await Promise.all(scratches.map((s) => b.mounts(layers, s)));
    await Promise.all(layers.map((id) => b.reader(id)));
    assert.equal(b.fetched, 4);
    for (const s of scratches) await b.discard(s);
  } finally {
    await w.done();
  }
});

test('cluster snapshotter: past its bound the cache evicts least recently used layers, never pinned ones, and fetches them again', async () => {
  const w = await world();
  try {
    const a = await w.worker();
    const b = await w.worker(10_000); // bytes of file data
    const big = (c: string) => c.repeat(4_000);
    const [l1, l2, l3] = [await commitFiles(a, { x: big('1') }), await commitFiles(a, { x: big('2') }), await commitFiles(a, { x: big('3') })].map((l) => l.layerId);
    w.pinned.add(l1);
    await b.reader(l1);
    await b.reader(l2);
    assert.deepEqual(b.usage(), { bytes: 8_000, layers: 2 });
    await b.reader(l3); // 12,000 > 10,000: l1 is oldest but pinned, so l2 goes
    assert.deepEqual(b.usage(), { bytes: 8_000, layers: 2 });
    assert.equal(b.fetched, 3);
    w.pinned.clear();
    assert.equal(await read(await b.reader(l2), 'x'), big('2'), 'an evicted layer comes back from the object store');
    assert.equal(b.fetched, 4);
    assert.deepEqual(b.usage(), { bytes: 8_000, layers: 2 }, 'l1, now unpinned and oldest, went');
  } finally {
    await w.done();
  }
});

test('cluster snapshotter: with the object store down, commits fail as unavailable and keep nothing; cached layers still read', async () => {
  const blobs = new MemoryBlobStore();
  const { put, get } = blobs;
  let down = false;
  const refused = () => { throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' }); };
  blobs.put = async (...args) => (down ? refused() : put.apply(blobs, args));
  blobs.get = async (...args) => (down ? refused() : get.apply(blobs, args));
  const w = await world(blobs);
  try {
    const [a, b] = [await w.worker(), await w.worker()];
    const cached = (await commitFiles(a, { f: 'cached' })).layerId;
    down = true;
    const unavailable = (e: Error & { code?: string }) => e.code === 'unavailable' && /object store/.test(e.message);
    await assert.rejects(commitFiles(a, { f: 'x' }), unavailable);
    assert.equal(w.index.rows.size, 1, 'only the first layer is recorded');
    assert.equal((await a.recover(async (ids) => new Set(ids.filter((id) => id === cached)))).layers, 0, 'no layer was left behind');
    assert.equal(await read(await a.reader(cached), 'f'), 'cached', 'a cached layer reads on');
    await assert.rejects(b.reader(cached), unavailable, 'a worker without it cannot fetch it');
    down = false;
    assert.equal(await read(await b.reader(cached), 'f'), 'cached', 'and can once the store is back');
  } finally {
    await w.done();
  }
});

test('layer packs: the same tree packs to the same bytes on another host (a fetched layer re-packed keeps its digest)', async () => {
  const dirs = [1, 2].map(() => mkdtempSync(path.join(tmpdir(), 'shellbase-pack-')));
  const stores = dirs.map((dir) => new BtrfsSnapshotter({
    root: path.join(dir, 'store'), imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: () => '/nonexistent', defaultDiskMb: 16, poolSize: 0, rootId: 100_000,
    dialer: new Dialer(path.join(dir, 'streams')),
  }));
  const blobs = new MemoryBlobStore();
  try {
    for (const s of stores) await s.open();
    const scratch = await stores[0].prepare({ diskMb: 16 });
    const w = stores[0].writer(scratch);
    w.mkdir('d', DIR);
    await w.writeFile('d/f', text('x'.repeat(100_000)), FILE);
    await w.whiteout('gone');
    w.mkdir('o', DIR);
    await w.setOpaque('o');
    const layer = (await stores[0].commit(scratch))!;
    await stores[0].sync(); // as the cluster snapshotter does before packing
    const first = await blobs.put(stores[0].exportLayer(layer.layerId));
    assert.deepEqual(await blobs.put(stores[0].exportLayer(layer.layerId)), first, 'packed twice on one host');
    await stores[1].importLayer(layer.layerId, await blobs.get(first.digest));
    await stores[1].sync();
    assert.deepEqual(await blobs.put(stores[1].exportLayer(layer.layerId)), first, 'unpacked and packed again on another');
    // A small tree's pack (compressed in process, as a commit's upload asks): the same on both hosts too.
    const small = await blobs.put(stores[0].exportLayer(layer.layerId, { bytes: layer.bytes }));
    assert.deepEqual(await blobs.put(stores[1].exportLayer(layer.layerId, { bytes: layer.bytes })), small, 'in process, on another host');
    const [src, dst] = await Promise.all(stores.map((s) => s.reader(layer.layerId)));
    const r = dst;
    // Packs keep modification times, not access times (pack.ts).
    const seen = (x: LayerReader, p: string) => ({ ...x.stat(p)!, atimeMs: 0 });
    for (const p of ['', 'd', 'd/f', 'gone', 'o']) assert.deepEqual(seen(r, p), seen(src, p), `${p || '/'}: kind, mode, owner, size, mtime`);
    assert.deepEqual([...r.opaque], ['o']);
  } finally {
    for (const s of stores) await s.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
});

test('layer packs: a damaged or cut pack is refused as invalid_pack and nothing of it is kept', async () => {
  const dirs = [1, 2].map(() => mkdtempSync(path.join(tmpdir(), 'shellbase-pack-')));
  const stores = dirs.map((dir) => new BtrfsSnapshotter({
    root: path.join(dir, 'store'), imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: () => '/nonexistent', defaultDiskMb: 16, poolSize: 0, rootId: 100_000,
    dialer: new Dialer(path.join(dir, 'streams')),
  }));
  try {
    for (const s of stores) await s.open();
    const scratch = await stores[0].prepare({ diskMb: 16 });
    await stores[0].writer(scratch).writeFile('f', text('y'.repeat(300_000)), FILE);
    const layer = (await stores[0].commit(scratch))!;
    await stores[0].sync();
    const chunks: Buffer[] = [];
    for await (const c of stores[0].exportLayer(layer.layerId)) chunks.push(c as Buffer);
    const whole = Buffer.concat(chunks);
    const badSum = Buffer.from(whole);
    badSum[badSum.length - 1] ^= 0xff; // the zstd frame's checksum
    for (const [what, bytes] of [['a wrong checksum', badSum], ['cut short', whole.subarray(0, whole.length - 40)]] as const) {
      await assert.rejects(stores[1].importLayer(layer.layerId, Readable.from([bytes])), (e: Error & { code?: string }) => {
        assert.equal(e.code, 'invalid_pack', e.message);
        assert.match(e.message, what === 'cut short' ? /premature end/ : /checksum/);
        return true;
      }, what);
      assert.equal(stores[1].has(layer.layerId), false, `${what}: nothing kept`);
    }
    await stores[1].importLayer(layer.layerId, Readable.from([whole]));
    assert.equal(await read(await stores[1].reader(layer.layerId), 'f'), 'y'.repeat(300_000));
  } finally {
    for (const s of stores) await s.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
});

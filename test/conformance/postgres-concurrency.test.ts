import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pino from 'pino';
import { ClusterWorker } from '../../packages/server/src/cluster/worker.ts';
import { Pins } from '../../packages/server/src/core/pins.ts';
import { Committer } from '../../packages/server/src/engine/commit.ts';
import type { BlobStore } from '../../packages/server/src/store/blobs/types.ts';
import { PostgresMetadataStore } from '../../packages/server/src/store/metadata/postgres/postgres-store.ts';
import type { MetadataStore, VersionRow } from '../../packages/server/src/store/metadata/types.ts';
import { startPostgres, type TestPostgres } from '../pg.ts';

// Three stores over one database, each with a pool of its own, stand for three workers: the
// engine's Committer (compare-and-set of the head, rebase on disjoint paths, conflict on
// overlapping ones) runs on each at once, and nothing a commit acknowledged may go missing.
let cluster: TestPostgres;
before(async () => { cluster = await startPostgres(); });
after(async () => { await cluster?.stop(); });

const now = () => new Date().toISOString();
const noSync = { layers: async () => undefined, metadata: async () => undefined };
/** What the committers report: a `version.committed` per head they moved. */
let reported: { kind: string; data: Record<string, unknown> }[] = [];
const sink = { emit: (e: { kind: string; data: Record<string, unknown> }) => { reported.push(e); } };

async function threeWorkers(): Promise<{ stores: PostgresMetadataStore[]; root: VersionRow; close: () => Promise<void> }> {
  const url = await cluster.createDatabase();
  const stores = await Promise.all([1, 2, 3].map(() => PostgresMetadataStore.open(url, { max: 4 })));
  const md = stores[0];
  await md.tenants.create({ id: 't1', name: 'one', admin: false, createdAt: now() });
  const root = { id: 'v0', tenantId: '', parent: null, depth: 0, layers: ['image:x:1'], changes: null, cause: { kind: 'image' as const }, bytes: 0, createdAt: now() };
  await md.versions.ensureImage(root, { id: 'image:x:1', kind: 'image', bytes: 0, createdAt: now() });
  await md.contexts.create({ tenantId: 't1', name: 'c', head: 'v0', image: 'x', createdAt: now(), updatedAt: now() });
  return { stores, root: (await md.versions.get('v0'))!, close: async () => { await Promise.all(stores.map((s) => s.close())); } };
}

/** The first two stores as cluster workers `w1` and `w2`, registered. */
async function asWorkers(stores: PostgresMetadataStore[]): Promise<[PostgresMetadataStore, PostgresMetadataStore]> {
  const [one, two] = stores;
  await one.cluster.ready;
  await one.cluster.register('w1', 'http://w1');
  await two.cluster.register('w2', 'http://w2');
  return [one, two];
}

/** The versions from the head down to the root, each once. */
async function history(md: MetadataStore): Promise<VersionRow[]> {
  const head = (await md.contexts.get('t1', 'c'))!.head;
  return md.versions.lineage(head, 10_000);
}

test('postgres: 60 commits on one context from three pools at once, on disjoint paths: all on the head, each once', async () => {
  const { stores, root, close } = await threeWorkers();
  reported = [];
  try {
    const committers = stores.map((md) => new Committer(md, noSync, sink));
    const outcomes = await Promise.all(Array.from({ length: 60 }, (_, i) => committers[i % 3].commit('t1', 'c', root,
      { layerId: `l${i}`, bytes: i + 1, changes: [[`/f${i}`, 'f']] }, { kind: 'exec' })));
    assert.ok(outcomes.every((o) => o.committed), 'disjoint paths always rebase');
    const chain = await history(stores[1]);
    assert.equal(chain.length, 61);
    const layers = chain[0].layers.slice(1).sort();
    assert.deepEqual(layers, Array.from({ length: 60 }, (_, i) => `l${i}`).sort(), 'each layer exactly once on the head');
    assert.deepEqual(new Set(outcomes.map((o) => o.version)), new Set(chain.slice(0, 60).map((v) => v.id)), 'every acknowledged version is in the history');
    assert.equal(await stores[2].tenants.storedBytes('t1'), (60 * 61) / 2, 'each layer counted once');
    assert.deepEqual(new Set(reported.map((e) => e.data.version)), new Set(outcomes.map((o) => o.version)), 'one version.committed per acknowledged commit');
    assert.equal(reported.length, 60);
  } finally {
    await close();
  }
});

test('postgres: 30 commits to one path from three pools at once: one wins per head, the rest are kept as conflicts', async () => {
  const { stores, root, close } = await threeWorkers();
  try {
    const committers = stores.map((md) => new Committer(md, noSync, sink));
    const outcomes = await Promise.all(Array.from({ length: 30 }, (_, i) => committers[i % 3].commit('t1', 'c', root,
      { layerId: `l${i}`, bytes: 1, changes: [['/same', 'f']] }, { kind: 'exec' })));
    const won = outcomes.filter((o) => o.committed);
    assert.equal(won.length, 1, 'all started from the root: after the first, every other one overlaps');
    assert.equal(outcomes.filter((o) => o.conflict).length, 29);
    for (const o of outcomes) assert.ok(await stores[(outcomes.indexOf(o) + 1) % 3].versions.get(o.version), 'every version is stored');
    assert.equal((await history(stores[0]))[0].id, won[0].version);
  } finally {
    await close();
  }
});

test('postgres: a commit fenced by a lease lands while the lease is its worker\'s at its epoch, and is refused once another worker took it over', async () => {
  const { stores, root, close } = await threeWorkers();
  try {
    const [one, two] = await asWorkers(stores);
    const first = await one.cluster.claim('service', 'tok', 'w1', 60_000);
    assert.deepEqual(first, { mine: true, epoch: 1 });
    const committer = new Committer(one, noSync, sink);
    const fence = { kind: 'service', key: 'tok', worker: 'w1', epoch: 1 };
    const ok = await committer.commit('t1', 'c', root, { layerId: 'l1', bytes: 1, changes: [['/a', 'f']] }, { kind: 'service' }, fence);
    assert.ok(ok.committed);
    // w1 taken for gone (an alive window of 0 ms): w2 takes the lease over, the epoch moves on.
    assert.deepEqual(await two.cluster.claim('service', 'tok', 'w2', 0), { mine: true, epoch: 2 });
    await assert.rejects(committer.commit('t1', 'c', root, { layerId: 'l2', bytes: 1, changes: [['/b', 'f']] }, { kind: 'service' }, fence),
      (e: Error & { code?: string }) => e.code === 'failed_precondition' && /taken over/.test(e.message));
    assert.equal((await one.contexts.get('t1', 'c'))!.head, ok.head, 'the stale commit moved nothing');
    const fresh = await new Committer(two, noSync, sink).commit('t1', 'c', root, { layerId: 'l3', bytes: 1, changes: [['/c', 'f']] }, { kind: 'service' }, { ...fence, worker: 'w2', epoch: 2 });
    assert.ok(fresh.committed, "the new holder's commit lands");
    // The holder's unclaim leaves the row to nobody: a fence names a lease that is gone then.
    await two.cluster.unclaim('service', 'tok', 'w2');
    await assert.rejects(new Committer(two, noSync, sink).commit('t1', 'c', root, { layerId: 'l4', bytes: 1, changes: [['/d', 'f']] }, { kind: 'service' }, { ...fence, worker: 'w2', epoch: 2 }),
      (e: Error & { code?: string }) => e.code === 'failed_precondition');
    // Taken again by the first worker, the lease gets an epoch never given before: the first
    // worker's stale fence (epoch 1) does not match its new lease.
    const again = await one.cluster.claim('service', 'tok', 'w1', 60_000);
    assert.ok(again.mine && again.epoch > 2, JSON.stringify(again));
    await assert.rejects(committer.commit('t1', 'c', root, { layerId: 'l5', bytes: 1, changes: [['/e', 'f']] }, { kind: 'service' }, fence),
      (e: Error & { code?: string }) => e.code === 'failed_precondition');
  } finally {
    await close();
  }
});

test('postgres: a worker back from an outage (its heartbeat lapsed) has its slots counted from its first admission on, by every worker', async () => {
  const { stores, close } = await threeWorkers();
  try {
    const [one, two] = await asWorkers(stores);
    await one.cluster.admit('w1', 't1', 'query', 3, 60_000);
    // w1 was cut off for longer than a lapse: its heartbeat is old, its running query's slot uncounted.
    await one.db.run("UPDATE cluster_workers SET heartbeat_at = now() - interval '1 hour' WHERE id = ?", ['w1']);
    // Back in touch, w1 admits before its next heartbeat: that admission counts its own slot (2 of 3)...
    assert.equal(await one.cluster.admit('w1', 't1', 'query', 3, 60_000), true);
    // ...and w2 counts both: one more fits, then none.
    assert.equal(await two.cluster.admit('w2', 't1', 'query', 3, 60_000), true);
    assert.equal(await two.cluster.admit('w2', 't1', 'query', 3, 60_000), false, 'the returning worker\'s slots are counted');
  } finally {
    await close();
  }
});

test('postgres: a machine row written or deleted under its lease: done while the lease is the worker\'s at its epoch, refused once another worker took it over', async () => {
  const { stores, close } = await threeWorkers();
  try {
    const [one, two] = await asWorkers(stores);
    const shape = { format: 2 as const, image: 'debian', memoryMb: 512, cpus: 1, diskGb: 8, idleTimeoutMs: 1000, ports: [] };
    const row = { id: 'm_1', tenantId: 't1', state: 'running' as const, createdAt: new Date().toISOString(), spec: { ...shape, disk: ['/d'] } };
    await one.machines.create(row);
    assert.deepEqual(await one.cluster.claim('machine', 'm_1', 'w1', 60_000), { mine: true, epoch: 1 });
    const fence = { kind: 'machine', key: 'm_1', worker: 'w1', epoch: 1 };
    await one.machines.update({ ...row, state: 'paused' }, fence);
    assert.equal((await two.machines.find('m_1'))?.state, 'paused');
    // w1 taken for gone: w2 takes the machine over and finds it lost.
    assert.deepEqual(await two.cluster.claim('machine', 'm_1', 'w2', 0), { mine: true, epoch: 2 });
    await two.machines.update({ ...row, state: 'lost' }, { ...fence, worker: 'w2', epoch: 2 });
    await assert.rejects(one.machines.update({ ...row, state: 'hibernated' }, fence),
      (e: Error & { code?: string }) => e.code === 'failed_precondition' && /taken over/.test(e.message));
    assert.equal((await one.machines.find('m_1'))?.state, 'lost', 'the stale worker wrote nothing');
    await assert.rejects(one.machines.delete('t1', 'm_1', fence), (e: Error & { code?: string }) => e.code === 'failed_precondition');
    assert.ok(await one.machines.find('m_1'), 'nor deleted it');
    await one.machines.update({ ...row, state: 'lost', spec: { ...row.spec, memoryMb: 1024 } });
    assert.equal((await one.machines.find('m_1'))?.spec.memoryMb, 1024, 'a write without a fence is not checked');
  } finally {
    await close();
  }
});

test('postgres: a worker whose heartbeat lapsed (a pause) starts nothing it admitted before, and works again for what it admits after', async () => {
  const url = await cluster.createDatabase();
  const md = await PostgresMetadataStore.open(url, { max: 2 });
  const worker = new ClusterWorker({
    shared: md.cluster, blobs: {} as BlobStore, pins: new Pins(), address: 'http://w', gateway: '', heartbeatMs: 100, blobGraceMs: 1000, load: () => 0, log: pino({ level: 'silent' }),
  });
  try {
    await md.cluster.ready;
    await worker.start();
    await worker.beat();
    const admitted = Date.now();
    worker.checkAlive(admitted);
    // Frozen for longer than three heartbeats (the others stop counting its slots).
    const until = Date.now() + 450;
    while (Date.now() < until) { /* the process does nothing else */ }
    const lapsed = (e: Error & { code?: string }) => e.code === 'unavailable' && /heartbeat lapsed/.test(e.message);
    assert.throws(() => worker.checkAlive(admitted), lapsed);
    // Its next heartbeat notices the gap: what was admitted before stays refused, what comes after is admitted.
    await worker.beat();
    assert.throws(() => worker.checkAlive(admitted), lapsed);
    worker.checkAlive(Date.now());
  } finally {
    await worker.stop();
    await md.close();
  }
});

test("postgres: a heartbeat replaces the worker's pins with what it names (kept, added, dropped) and answers false once its row is gone", async () => {
  const { stores, close } = await threeWorkers();
  try {
    const [one, two] = await asWorkers(stores);
    const pinned = async () => {
      const p = await two.cluster.pinnedElsewhere('w2', 60_000);
      return { versions: [...p.versions].sort(), layers: [...p.layers].sort() };
    };
    assert.equal(await one.cluster.heartbeat('w1', 1, { versions: ['v1', 'v2'], layers: ['l1'] }), true);
    assert.deepEqual(await pinned(), { versions: ['v1', 'v2'], layers: ['l1'] });
    // A name in both kinds is two pins; what the beat no longer names goes.
    assert.equal(await one.cluster.heartbeat('w1', 1, { versions: ['v2', 'x'], layers: ['l2', 'x'] }), true);
    assert.deepEqual(await pinned(), { versions: ['v2', 'x'], layers: ['l2', 'x'] });
    assert.equal(await one.cluster.heartbeat('w1', 0, { versions: [], layers: [] }), true);
    assert.deepEqual(await pinned(), { versions: [], layers: [] });
    assert.equal((await two.cluster.liveWorkers(60_000)).find((w) => w.id === 'w1')?.load, 0, 'the load the beat carried');
    await two.cluster.leave('w1');
    assert.equal(await one.cluster.heartbeat('w1', 1, { versions: ['v1'], layers: [] }), false, 'a worker taken for gone registers again');
    assert.deepEqual(await pinned(), { versions: [], layers: [] }, 'and pins nothing meanwhile');
  } finally {
    await close();
  }
});

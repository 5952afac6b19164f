import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { CLUSTER_MIGRATIONS } from '../packages/server/src/store/metadata/postgres/cluster-migrations.ts';
import { migrate } from '../packages/server/src/store/metadata/postgres/migrate.ts';
import { PostgresMetadataStore } from '../packages/server/src/store/metadata/postgres/postgres-store.ts';
import type { MachineRow, StoredMachineFiles } from '../packages/server/src/store/metadata/types.ts';
import { startPostgres, type TestPostgres } from './pg.ts';

// Which blobs of machines' files the object store may lose: `cluster_machine_blobs` against a real
// Postgres (test/pg.ts), a database per case. The machines that write it run in
// test/cluster-machines-e2b.test.ts, which checks the blobs are deleted from the object store.
let postgres: TestPostgres;
before(async () => { postgres = await startPostgres(); });
after(async () => { await postgres?.stop(); });

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try { return (await c.query<T>(sql)).rows; } finally { await c.end(); }
}

const stored = (ram: string, state: string, disk: string[]): StoredMachineFiles => ({
  format: 1, id: `st_${ram}`, ram: { digest: ram, name: 'ram' }, state: { digest: state, name: 'state.bin' }, disk: disk.map((digest) => ({ digest, name: 'disk.qcow2' })),
});

test('machine blobs: a blob goes to the deletion queue when nothing names it any more (no machine, snapshot or layer), and comes off it when named again', async () => {
  const url = await postgres.createDatabase();
  const md = await PostgresMetadataStore.open(url);
  try {
    const c = md.cluster;
    await c.ready;
    await c.holdMachineBlobs('m_1', ['sha256:ram1', 'sha256:state1', 'sha256:top1', 'sha256:base']);
    await c.holdMachineBlobs('s_1', ['sha256:ram2', 'sha256:state2', 'sha256:base']);
    await c.holdMachineBlobs('m_1', ['sha256:base']);
    // A hibernation replaced m_1's files: its old memory goes, the base it still names stays.
    await c.holdMachineBlobs('m_1', ['sha256:ram3']);
    assert.equal(await c.releaseMachineBlobs('m_1', ['sha256:ram3', 'sha256:base'], 0), 3);
    // m_1 deleted: the base is still the snapshot's (queued too, and taken off the queue when due, as named).
    assert.equal(await c.releaseMachineBlobs('m_1', [], 0), 2);
    assert.deepEqual((await c.dueBlobDeletions(100)).sort(), ['sha256:ram1', 'sha256:ram3', 'sha256:state1', 'sha256:top1']);
    // The snapshot deleted: its files and the base go too; but a machine stores the base again first.
    assert.equal(await c.releaseMachineBlobs('s_1', [], 0), 3);
    await c.holdMachineBlobs('m_2', ['sha256:base']);
    assert.deepEqual((await c.dueBlobDeletions(100)).sort(), ['sha256:ram1', 'sha256:ram2', 'sha256:ram3', 'sha256:state1', 'sha256:state2', 'sha256:top1']);
    // A blob a layer names (the same bytes) is never deleted, whenever it was queued.
    await c.recordBlob({ layerId: 'l_1', digest: 'sha256:same', size: 1, format: 1 });
    await c.holdMachineBlobs('m_3', ['sha256:same']);
    assert.equal(await c.releaseMachineBlobs('m_3', [], 0), 1);
    for (const d of await c.dueBlobDeletions(100)) await c.deletionDone(d);
    assert.deepEqual(await c.dueBlobDeletions(100), []);
    // Within the grace period a queued blob is not due.
    assert.equal(await c.releaseMachineBlobs('m_2', [], 60_000), 1);
    assert.deepEqual(await c.dueBlobDeletions(100), []);
    assert.deepEqual(await query(url, 'SELECT digest FROM cluster_blob_deletions'), [{ digest: 'sha256:base' }]);
    assert.deepEqual(await query(url, 'SELECT owner FROM cluster_machine_blobs'), []);
  } finally {
    await md.close();
  }
});

test('machine blobs: two owners letting one blob go at once still queue it (neither sees the other\'s release before it commits)', async () => {
  const url = await postgres.createDatabase();
  const md = await PostgresMetadataStore.open(url);
  const other = new pg.Client({ connectionString: url });
  try {
    const c = md.cluster;
    await c.ready;
    await c.holdMachineBlobs('m_1', ['sha256:shared']);
    await c.holdMachineBlobs('s_1', ['sha256:shared']);
    // The snapshot's release, in flight: its row gone in a transaction not yet committed.
    await other.connect();
    await other.query('BEGIN');
    await other.query("DELETE FROM cluster_machine_blobs WHERE owner = 's_1'");
    assert.equal(await c.releaseMachineBlobs('m_1', [], 0), 1);
    await other.query('COMMIT');
    assert.deepEqual(await c.dueBlobDeletions(100), ['sha256:shared'], 'queued by the release that saw the other owner still holding it');
  } finally {
    await other.end().catch(() => undefined);
    await md.close();
  }
});

test('machine blobs: the migration that adds the table fills it from the stored files machines and snapshots name (and the next one starts lease epochs past those given)', async () => {
  const url = await postgres.createDatabase();
  const md = await PostgresMetadataStore.open(url);
  try {
    await md.cluster.ready;
    const shape = { format: 2 as const, image: 'debian', memoryMb: 512, cpus: 1, diskGb: 8, idleTimeoutMs: 1000, ports: [] };
    const machine = (id: string, extra: Partial<MachineRow['spec']>): MachineRow => ({ id, tenantId: 't1', state: 'hibernated', createdAt: new Date().toISOString(), spec: { ...shape, disk: ['/d'], ...extra } });
    await md.machines.create(machine('m_1', { stored: stored('sha256:r1', 'sha256:s1', ['sha256:t1', 'sha256:base']) }));
    await md.machines.create(machine('m_2', {}));
    await md.machines.createSnapshot({
      id: 's_1', tenantId: 't1', machineId: 'm_1', createdAt: new Date().toISOString(),
      spec: { ...shape, disk: ['/d'], ram: '/r', state: '/s', qemu: 'QEMU', machineType: 'microvm', accel: 'tcg', ports: [], stored: stored('sha256:r2', 'sha256:s2', ['sha256:base']) },
    });
    // A lease taken before version 6 (its epoch counted per row).
    await md.cluster.register('w1', 'http://w1');
    await query(url, "INSERT INTO cluster_leases (kind, key, worker_id, epoch) VALUES ('service', 'old', 'w1', 41)");
    // As before version 5.
    await query(url, 'DROP TABLE cluster_machine_blobs; DROP SEQUENCE cluster_lease_epochs; UPDATE cluster_schema_version SET version = 4');
    const pool = new pg.Pool({ connectionString: url });
    try { await migrate(pool, CLUSTER_MIGRATIONS, 'cluster_schema_version'); } finally { await pool.end(); }
    // Version 6: epochs come from one sequence, past every epoch given before.
    assert.deepEqual(await md.cluster.claim('service', 'new', 'w1', 60_000), { mine: true, epoch: 42 });
    assert.deepEqual(await query(url, 'SELECT owner, digest FROM cluster_machine_blobs ORDER BY owner, digest'), [
      { owner: 'm_1', digest: 'sha256:base' }, { owner: 'm_1', digest: 'sha256:r1' }, { owner: 'm_1', digest: 'sha256:s1' }, { owner: 'm_1', digest: 'sha256:t1' },
      { owner: 's_1', digest: 'sha256:base' }, { owner: 's_1', digest: 'sha256:r2' }, { owner: 's_1', digest: 'sha256:s2' },
    ]);
  } finally {
    await md.close();
  }
});

test('machine blobs: a blob of the object store that nothing names (an upload whose worker died before recording it) is queued; named or queued ones are left alone', async () => {
  const url = await postgres.createDatabase();
  const md = await PostgresMetadataStore.open(url);
  try {
    const c = md.cluster;
    await c.ready;
    const [layer, machine, orphan, queued] = ['layer', 'machine', 'orphan', 'queued'].map((s) => `sha256:${s.padEnd(64, '0')}`);
    await c.recordBlob({ layerId: 'l_1', digest: layer, size: 5, format: 1 });
    await c.holdMachineBlobs('m_1', [machine]);
    await c.holdMachineBlobs('m_2', [queued]);
    assert.equal(await c.releaseMachineBlobs('m_2', [], 60_000), 1);
    assert.equal(await c.queueOrphanBlobs([layer, machine, orphan, queued], 0), 1, 'only the orphan');
    assert.deepEqual(await c.dueBlobDeletions(100), [orphan], 'the queued one keeps its own due time');
    assert.equal(await c.queueOrphanBlobs([orphan], 60_000), 0, 'queued once');
    // Named before it falls due (its upload was recorded after all): it stays.
    await c.deletionDone(orphan);
    assert.equal(await c.queueOrphanBlobs([orphan], 0), 1);
    await c.holdMachineBlobs('m_3', [orphan]);
    assert.deepEqual(await c.dueBlobDeletions(100), []);
  } finally {
    await md.close();
  }
});

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { MIGRATIONS } from '../../packages/server/src/store/metadata/sqlite/migrations.ts';
import { SqliteMetadataStore } from '../../packages/server/src/store/metadata/sqlite/sqlite-store.ts';
import { SqliteSnapshot } from '../../packages/server/src/store/metadata/sqlite/snapshot.ts';
import { metadataStoreConformance } from './metadata-store.ts';

metadataStoreConformance('sqlite metadata store', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-meta-'));
  const md = new SqliteMetadataStore(path.join(dir, 'meta.db'));
  return { md, done: async () => { await md.close(); rmSync(dir, { recursive: true, force: true }); } };
});

test('sqlite: a database of schema 1 migrates in place and keeps its rows', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-meta-'));
  try {
    const file = path.join(dir, 'meta.db');
    const old = new Database(file);
    old.exec(MIGRATIONS[0]);
    old.pragma('user_version = 1');
    old.prepare(`INSERT INTO versions (id, tenant_id, parent, depth, layers, changes, cause, bytes, created_at)
      VALUES ('v0', '', NULL, 0, '["image:x:1"]', NULL, '{"kind":"image"}', 0, 'now')`).run();
    old.close();
    const md = new SqliteMetadataStore(file);
    const v = await md.versions.get('v0');
    assert.deepEqual({ layers: v!.layers, merged: v!.merged }, { layers: ['image:x:1'], merged: null });
    await md.close();
    const check = new Database(file);
    assert.equal(check.pragma('user_version', { simple: true }), MIGRATIONS.length);
    assert.equal(check.pragma('auto_vacuum', { simple: true }), 2, 'a small database is vacuumed once into incremental vacuum');
    check.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sqlite: schema 7 (before the store counted) opens with its layer references, stored bytes and unattached versions counted', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-meta-'));
  try {
    const file = path.join(dir, 'meta.db');
    const old = new Database(file);
    for (const m of MIGRATIONS.slice(0, 7)) old.exec(m);
    old.pragma('user_version = 7');
    old.exec(`INSERT INTO tenants (id, name, admin, created_at) VALUES ('t1', 'one', 0, 'x');
      INSERT INTO layers (id, kind, bytes, created_at) VALUES ('image:x:1', 'image', 0, 'x'), ('la', 'exec', 10, 'x'), ('lb', 'exec', 20, 'x'), ('lc', 'exec', 5, 'x');
      INSERT INTO versions (id, tenant_id, parent, depth, layers, changes, cause, bytes, created_at, context) VALUES
        ('v0', '', NULL, 0, '["image:x:1"]', NULL, '{"kind":"image"}', 0, 'x', NULL),
        ('a', 't1', 'v0', 1, '["image:x:1","la"]', '[]', '{"kind":"exec"}', 10, 'x', 'c'),
        ('b', 't1', 'a', 2, '["image:x:1","la","lb"]', '[]', '{"kind":"exec"}', 20, 'x', 'c'),
        ('conflict', 't1', 'a', 2, '["image:x:1","la","lc"]', '[]', '{"kind":"exec"}', 5, 'x', 'c');
      INSERT INTO contexts (tenant_id, name, head, image, created_at, updated_at) VALUES ('t1', 'c', 'b', 'x', 'x', 'x');`);
    old.close();
    const md = new SqliteMetadataStore(file);
    assert.equal(await md.tenants.storedBytes('t1'), 35);
    const db = new Database(file, { readonly: true });
    assert.deepEqual(db.prepare('SELECT id, refs FROM layers ORDER BY id').all(), [
      { id: 'image:x:1', refs: 4 }, { id: 'la', refs: 3 }, { id: 'lb', refs: 1 }, { id: 'lc', refs: 1 }]);
    assert.deepEqual(db.prepare('SELECT id FROM versions WHERE detached = 1').all(), [{ id: 'conflict' }]);
    db.close();
    // The counts are live: dropping the conflict frees lc.
    const r = await md.versions.drop(['conflict'], new Set());
    assert.deepEqual(r.layers.map((l) => l.id), ['lc']);
    assert.equal(await md.tenants.storedBytes('t1'), 30);
    await md.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sqlite: a snapshot taken while commits go on is one moment of the store, read by SqliteSnapshot', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-meta-'));
  const md = new SqliteMetadataStore(path.join(dir, 'meta.db'));
  try {
    const now = new Date().toISOString();
    await md.tenants.create({ id: 't1', name: 't1', admin: false, createdAt: now });
    await md.versions.ensureImage({ id: 'v0', tenantId: '', parent: null, depth: 0, layers: ['image:x:1'], changes: null, cause: { kind: 'image' }, bytes: 0, createdAt: now },
      { id: 'image:x:1', kind: 'image', bytes: 0, createdAt: now });
    await md.contexts.create({ tenantId: 't1', name: 'c', head: 'v0', image: 'x', createdAt: now, updatedAt: now });
    let head = 'v0';
    let n = 0;
    let going = true;
    const writer = (async () => {
      while (going) {
        const id = `v${++n}`;
        const layers = ['image:x:1', `l${n}`];
        assert.ok(await md.versions.commit({
          version: { id, tenantId: 't1', parent: head, depth: n, layers, changes: [], cause: { kind: 'write', command: 'w' }, bytes: 1, createdAt: now },
          layer: { id: `l${n}`, kind: 'exec', bytes: 1, createdAt: now }, moveHead: { tenantId: 't1', context: 'c', expectedHead: head },
        }));
        head = id;
        await new Promise((r) => setImmediate(r));
      }
    })();
    while (n < 20) await new Promise((r) => setTimeout(r, 5));
    const file = path.join(dir, 'copy.db');
    // A transaction open on the store's connection while the copy is made is not in it.
    let release = () => undefined as void;
    const held = new Promise<void>((r) => { release = r; });
    const open = md.db.tx(async (db) => {
      await db.run("INSERT INTO tenants (id, name, admin, created_at) VALUES ('t_open', 'open', 0, 'now')");
      await held;
    });
    await md.snapshot(file);
    const atCopy = n;
    release();
    await open;
    going = false;
    await writer;
    const snap = new SqliteSnapshot(file);
    try {
      const copyHead = (await snap.contexts.get('t1', 'c'))!.head;
      const k = Number(copyHead.slice(1));
      assert.ok(k >= 20 && k <= atCopy, `the copy's head (${copyHead}) is a commit made before the copy ended`);
      assert.deepEqual((await snap.versions.layers()).map((l) => l.id).sort(), ['image:x:1', ...Array.from({ length: k }, (_, i) => `l${i + 1}`)].sort(), 'exactly the layers of its versions');
      assert.deepEqual(await snap.counts(), { tenants: 1, contexts: 1, versions: k + 1 }, 'the open transaction\'s tenant is not in the copy');
      assert.equal(snap.schema, MIGRATIONS.length);
    } finally {
      await snap.close();
    }
  } finally {
    await md.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

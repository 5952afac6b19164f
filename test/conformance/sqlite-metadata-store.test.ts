import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { MIGRATIONS } from '../../packages/server/src/store/metadata/sqlite/migrations.ts';
import { SqliteMetadataStore } from '../../packages/server/src/store/metadata/sqlite/sqlite-store.ts';
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
    const v = await md.getVersion('v0');
    assert.deepEqual({ layers: v!.layers, merged: v!.merged }, { layers: ['image:x:1'], merged: null });
    await md.close();
    const check = new Database(file);
    assert.equal(check.pragma('user_version', { simple: true }), MIGRATIONS.length);
    check.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

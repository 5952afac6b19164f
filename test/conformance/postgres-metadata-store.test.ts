import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { openMetadataStore, SqliteMetadataStore } from '../../packages/server/src/store/metadata/index.ts';
import { MIGRATIONS as SQLITE_MIGRATIONS } from '../../packages/server/src/store/metadata/sqlite/migrations.ts';
import { MIGRATIONS } from '../../packages/server/src/store/metadata/postgres/migrations.ts';
import { PostgresMetadataStore } from '../../packages/server/src/store/metadata/postgres/postgres-store.ts';
import { startPostgres, type TestPostgres } from '../pg.ts';
import { metadataStoreConformance } from './metadata-store.ts';

// Postgres runs for real: one throw-away cluster for this file (test/pg.ts), a database per case.
// Concurrency between workers: postgres-concurrency.test.ts.
let cluster: TestPostgres;
before(async () => { cluster = await startPostgres(); });
after(async () => { await cluster?.stop(); });

metadataStoreConformance('postgres metadata store', async () => {
  const md = await PostgresMetadataStore.open(await cluster.createDatabase());
  return { md, done: () => md.close() };
});

const LATEST = MIGRATIONS[MIGRATIONS.length - 1].version;

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try { return (await c.query<T>(sql)).rows; } finally { await c.end(); }
}

test('postgres: migrations make an empty database current, and a restart (or three at once) changes nothing', async () => {
  const url = await cluster.createDatabase();
  const md = await PostgresMetadataStore.open(url);
  assert.deepEqual(await query(url, 'SELECT version FROM schema_version'), [{ version: LATEST }]);
  await md.tenants.create({ id: 't1', name: 'one', admin: false, createdAt: 'x' });
  await md.close();
  const again = await Promise.all([1, 2, 3].map(() => PostgresMetadataStore.open(url)));
  assert.equal((await again[0].tenants.get('t1'))?.name, 'one', 'rows kept');
  await Promise.all(again.map((s) => s.close()));
  assert.deepEqual(await query(url, 'SELECT version FROM schema_version'), [{ version: LATEST }]);

  // Several workers starting on an empty database at once: one migrates, the others wait and find it done.
  const fresh = await cluster.createDatabase();
  const racing = await Promise.all([1, 2, 3].map(() => PostgresMetadataStore.open(fresh)));
  await Promise.all(racing.map((s) => s.close()));
  assert.deepEqual(await query(fresh, 'SELECT version FROM schema_version'), [{ version: LATEST }]);
});

test('postgres: a database of a newer schema is refused, at open and by every statement', async () => {
  const url = await cluster.createDatabase();
  await (await PostgresMetadataStore.open(url)).close();
  await query(url, `UPDATE schema_version SET version = ${LATEST + 1}`);
  await assert.rejects(PostgresMetadataStore.open(url), new RegExp(`schema ${LATEST + 1} is newer than this server knows \\(${LATEST}\\)`));
  const md = new PostgresMetadataStore(url);
  await assert.rejects(md.tenants.list(), /is newer than this server knows/);
  await md.close();
});

/** A schema as both dialects can describe it: tables' columns (type family, null), keys, explicit indexes, foreign keys. */
interface Shape { columns: string[]; keys: string[]; indexes: string[]; foreignKeys: string[] }
const family = (type: string) => (/int/i.test(type) ? 'integer' : /text/i.test(type) ? 'text' : /real|double/i.test(type) ? 'real' : type);

function sqliteShape(): Shape {
  const db = new Database(':memory:');
  for (const m of SQLITE_MIGRATIONS) db.exec(m);
  const tables = (db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as { name: string }[]).map((t) => t.name);
  const shape: Shape = { columns: [], keys: [], indexes: [], foreignKeys: [] };
  for (const t of tables) {
    const cols = db.prepare(`PRAGMA table_info(${t})`).all() as { name: string; type: string; notnull: number; pk: number }[];
    // Postgres makes every primary key column NOT NULL; SQLite says so only of INTEGER PRIMARY KEY.
    shape.columns.push(...cols.map((c) => `${t}.${c.name} ${family(c.type)}${c.notnull || c.pk ? ' not null' : ''}`));
    const pk = cols.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
    if (pk.length) shape.keys.push(`${t} primary (${pk.join(', ')})`);
    for (const i of db.prepare(`PRAGMA index_list(${t})`).all() as { name: string; unique: number; origin: string; partial: number }[]) {
      const on = (db.prepare(`PRAGMA index_info(${i.name})`).all() as { name: string }[]).map((c) => c.name).join(', ');
      if (i.origin === 'u') shape.keys.push(`${t} unique (${on})`);
      if (i.origin === 'c') shape.indexes.push(`${i.name} on ${t} (${on})${i.partial ? ' partial' : ''}`);
    }
    for (const f of db.prepare(`PRAGMA foreign_key_list(${t})`).all() as { table: string; from: string; to: string; on_delete: string }[]) {
      shape.foreignKeys.push(`${t}.${f.from} -> ${f.table}.${f.to} on delete ${f.on_delete.toLowerCase()}`);
    }
  }
  db.close();
  return shape;
}

async function postgresShape(url: string): Promise<Shape> {
  const mine = "n.nspname = 'public' AND t.relname != 'schema_version' AND left(t.relname, 8) != 'cluster_'"; // cluster_*: cluster mode's own tables
  const columns = await query<{ s: string }>(url, `SELECT t.relname || '.' || a.attname || ' ' || format_type(a.atttypid, NULL) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
    || CASE WHEN a.attcollation != 0 AND (SELECT collname FROM pg_collation WHERE oid = a.attcollation) != 'C' THEN ' (not collated "C")' ELSE '' END AS s
    FROM pg_attribute a JOIN pg_class t ON t.oid = a.attrelid JOIN pg_namespace n ON n.oid = t.relnamespace
    WHERE ${mine} AND t.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped`);
  const cols = (ix: string) => `(SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(${ix}.indkey) WITH ORDINALITY k(attnum, n) JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum)`;
  const indexes = await query<{ s: string; kind: string }>(url, `SELECT CASE WHEN ix.indisprimary THEN 'key' WHEN ix.indisunique THEN 'key' ELSE 'index' END AS kind,
      CASE WHEN ix.indisprimary THEN t.relname || ' primary (' || ${cols('ix')} || ')'
           WHEN ix.indisunique THEN t.relname || ' unique (' || ${cols('ix')} || ')'
           ELSE i.relname || ' on ' || t.relname || ' (' || ${cols('ix')} || ')' || CASE WHEN ix.indpred IS NOT NULL THEN ' partial' ELSE '' END END AS s
    FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid JOIN pg_class t ON t.oid = ix.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace WHERE ${mine}`);
  const fks = await query<{ s: string }>(url, `SELECT t.relname || '.' || a.attname || ' -> ' || r.relname || '.' || ra.attname || ' on delete '
      || CASE c.confdeltype WHEN 'c' THEN 'cascade' WHEN 'a' THEN 'no action' ELSE c.confdeltype::text END AS s
    FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace JOIN pg_class r ON r.oid = c.confrelid
      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] JOIN pg_attribute ra ON ra.attrelid = c.confrelid AND ra.attnum = c.confkey[1]
    WHERE ${mine} AND c.contype = 'f'`);
  return {
    columns: columns.map((c) => c.s.replace(/ (integer|bigint|smallint)/, ' integer').replace(/ double precision| real/, ' real')),
    keys: indexes.filter((i) => i.kind === 'key').map((i) => i.s),
    indexes: indexes.filter((i) => i.kind === 'index').map((i) => i.s),
    foreignKeys: fks.map((f) => f.s),
  };
}

test(`postgres: schema ${LATEST} has SQLite's tables, columns, keys, indexes and foreign keys; text is collated "C"`, async () => {
  assert.equal(LATEST, SQLITE_MIGRATIONS.length, 'each dialect has every schema version (a new migration goes into both)');
  const url = await cluster.createDatabase();
  await (await PostgresMetadataStore.open(url)).close();
  const [want, got] = [sqliteShape(), await postgresShape(url)];
  for (const k of ['columns', 'keys', 'indexes', 'foreignKeys'] as const) assert.deepEqual(got[k].sort(), want[k].sort(), k);
});

test('postgres: SHELLBASE_METADATA picks the backend: unset or sqlite:PATH for SQLite, postgres:// for Postgres', async () => {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-meta-'));
  try {
    for (const [url, file] of [[undefined, 'meta.db'], ['sqlite:other.db', 'other.db'], [`sqlite://${home}/abs.db`, 'abs.db']] as const) {
      const md = await openMetadataStore(url, home);
      assert.ok(md instanceof SqliteMetadataStore, String(url));
      await md.tenants.create({ id: 't', name: 'n', admin: false, createdAt: 'x' });
      await md.close();
      const check = new Database(path.join(home, file), { readonly: true });
      assert.equal((check.prepare('SELECT COUNT(*) AS n FROM tenants').get() as { n: number }).n, 1, file);
      check.close();
    }
    const md = await openMetadataStore(await cluster.createDatabase(), home);
    assert.ok(md instanceof PostgresMetadataStore);
    assert.deepEqual(await md.tenants.list(), []);
    await md.close();
    await assert.rejects(openMetadataStore('mysql://u:secret@h/db', home), (e: Error & { code?: string }) =>
      e.code === 'invalid_argument' && !e.message.includes('secret'));
    await assert.rejects(openMetadataStore(cluster.url('no_such_database'), home), /no_such_database/);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

test('postgres: a database that goes away fails statements as unavailable, and the same store recovers once it is back', async () => {
  const md = await PostgresMetadataStore.open(await cluster.createDatabase());
  try {
    await md.tenants.create({ id: 't1', name: 'one', admin: false, createdAt: 'x' });
    await cluster.restart(async () => {
      const isUnavailable = (e: Error & { code?: string; status?: number }) => e.code === 'unavailable' && e.status === 503 && /metadata database/.test(e.message);
      await assert.rejects(md.tenants.list(), isUnavailable);
      await assert.rejects(md.versions.drop(['nothing'], new Set()), isUnavailable, 'transactions too');
    });
    // The pool may hand out a connection the restart ended once more: the next attempt is fresh.
    let tenants;
    for (let attempt = 0; ; attempt++) {
      try { tenants = await md.tenants.list(); break; } catch (e) { if ((e as { code?: string }).code !== 'unavailable' || attempt > 10) throw e; }
    }
    assert.deepEqual(tenants.map((t) => t.name), ['one']);
  } finally {
    await md.close();
  }
});

import pg from 'pg';
import { MIGRATIONS, type PostgresMigration } from './migrations.js';

/** The advisory lock under which one process at a time migrates a database: a fixed 64-bit key ("shellbas" in ASCII). */
export const MIGRATION_LOCK = '8316008228288881011';

/**
 * Applies the migrations of `list` past the version recorded in `table` (one row), each in a
 * transaction of its own, under an advisory lock: the metadata schema (migrations.ts, table
 * `schema_version`) and the cluster's own tables (cluster-migrations.ts, `cluster_schema_version`).
 */
export async function migrate(pool: pg.Pool, list: readonly PostgresMigration[] = MIGRATIONS, table = 'schema_version'): Promise<void> {
  const latest = list[list.length - 1].version;
  await underMigrationLock(pool, async (client) => {
    await client.query(`CREATE TABLE IF NOT EXISTS ${table} (
      one INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1),
      version INTEGER NOT NULL
    )`);
    const current = Number((await client.query<{ version: number }>(`SELECT version FROM ${table}`)).rows[0]?.version ?? 0);
    if (current > latest) throw new Error(`database ${table === 'schema_version' ? 'schema' : table.replace(/_version$/, '').replace('_', ' ')} ${current} is newer than this server knows (${latest})`);
    const next = list.find((m) => m.version > current);
    if (!next) return false;
    await client.query(next.sql);
    await client.query(`INSERT INTO ${table} (one, version) VALUES (1, $1) ON CONFLICT (one) DO UPDATE SET version = excluded.version`, [next.version]);
    return true;
  });
}

/**
 * Runs `step` in transactions of its own on one connection, each under the migration lock, for as
 * long as it answers true. The connection is the pool's settings without their statement timeout
 * (a migration may rewrite a large table, and waits for the lock while another worker migrates),
 * and is closed after.
 */
export async function underMigrationLock(pool: pg.Pool, step: (client: pg.ClientBase) => Promise<boolean>): Promise<void> {
  const client = new pg.Client({ ...pool.options, query_timeout: undefined });
  // A connection lost meanwhile fails the statement in flight; the event itself is not an error to throw.
  client.on('error', () => undefined);
  await client.connect();
  try {
    for (let more = true; more;) {
      await client.query('BEGIN');
      try {
        await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
        more = await step(client);
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw e;
      }
    }
  } finally {
    await client.end().catch(() => undefined);
  }
}

import type pg from 'pg';
import { SqlMetadataStore } from '../sql/store.js';
import { MIGRATIONS } from './migrations.js';
import { PostgresDb, type PostgresDbOptions } from './postgres-db.js';

/** The advisory lock under which one process at a time migrates a database: a fixed 64-bit key ("shellbas" in ASCII). */
const MIGRATION_LOCK = '8316008228288881011';

/**
 * The cluster's metadata store: a Postgres database reached by a connection URL
 * (`postgres://user:password@host:port/database`, with `?sslmode=…` and the rest of libpq's URL
 * settings that pg reads), through a pool. Migrations (migrations.ts) run when it opens, one
 * process at a time; every statement waits for them. Concurrency: postgres-db.ts.
 */
export class PostgresMetadataStore extends SqlMetadataStore {
  declare readonly db: PostgresDb;
  /** Resolves once the schema is current; rejects with the reason it could not be made so (so does every statement). */
  readonly ready: Promise<void>;
  private readonly pool: pg.Pool;

  constructor(url: string, options: PostgresDbOptions = {}) {
    const pool = PostgresDb.pool(url, options);
    const ready = migrate(pool);
    ready.catch(() => undefined); // not unhandled: whoever uses the store gets the error
    super(new PostgresDb(pool, ready));
    this.ready = ready;
    this.pool = pool;
  }

  /** A store whose schema is current (an unreachable database or a failed migration is thrown here). */
  static async open(url: string, options: PostgresDbOptions = {}): Promise<PostgresMetadataStore> {
    const store = new PostgresMetadataStore(url, options);
    try {
      await store.ready;
    } catch (e) {
      await store.close();
      throw e;
    }
    return store;
  }

  /** A no-op: COMMIT returns once its WAL record is flushed (Postgres's default, synchronous_commit = on). */
  async sync(): Promise<void> {}

  /** A no-op: autovacuum returns dead rows' space to Postgres. */
  async reclaim(): Promise<void> {}

  async close(): Promise<void> {
    await this.ready.catch(() => undefined);
    await this.pool.end();
  }
}

/** Applies the migrations past the database's `schema_version`, each in a transaction of its own, under an advisory lock. */
export async function migrate(pool: pg.Pool): Promise<void> {
  const latest = MIGRATIONS[MIGRATIONS.length - 1].version;
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    for (;;) {
      await client.query('BEGIN');
      try {
        await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
        await client.query(`CREATE TABLE IF NOT EXISTS schema_version (
          one INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1),
          version INTEGER NOT NULL
        )`);
        const current = Number((await client.query<{ version: number }>('SELECT version FROM schema_version')).rows[0]?.version ?? 0);
        if (current > latest) throw new Error(`database schema ${current} is newer than this server knows (${latest})`);
        const next = MIGRATIONS.find((m) => m.version > current);
        if (!next) {
          await client.query('COMMIT');
          return;
        }
        await client.query(next.sql);
        await client.query('INSERT INTO schema_version (one, version) VALUES (1, $1) ON CONFLICT (one) DO UPDATE SET version = excluded.version', [next.version]);
        await client.query('COMMIT');
      } catch (e) {
        await client.query('ROLLBACK').catch((err: Error) => { broken = err; });
        throw e;
      }
    }
  } finally {
    client.release(broken);
  }
}

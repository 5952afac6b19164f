import type pg from 'pg';
import { SqlMetadataStore } from '../sql/store.js';
import { migrate } from './migrate.js';
import { PostgresCluster } from './cluster-store.js';
import { PostgresDb, type PostgresDbOptions } from './postgres-db.js';
import { PostgresVersions } from './postgres-versions.js';
import { CachedTenants } from './tenants-cache.js';
import { installRoutines } from './routines.js';


/**
 * The cluster's metadata store: a Postgres database reached by a connection URL
 * (`postgres://user:password@host:port/database`, with `?sslmode=…` and the rest of libpq's URL
 * settings that pg reads), through a pool. Migrations (migrations.ts) and the dialect's functions
 * (routines.ts) are made when it opens, one process at a time; every statement waits for them.
 * Concurrency: postgres-db.ts.
 */
export class PostgresMetadataStore extends SqlMetadataStore {
  declare readonly db: PostgresDb;
  /** The tenants repository, whose key lookups are kept while it listens for changes (`listen`). */
  private readonly cachedTenants: CachedTenants;
  /** Resolves once the schema is current; rejects with the reason it could not be made so (so does every statement). */
  readonly ready: Promise<void>;
  private readonly pool: pg.Pool;

  constructor(url: string, options: PostgresDbOptions = {}) {
    const pool = PostgresDb.pool(url, options);
    const ready = migrate(pool).then(() => installRoutines(pool));
    ready.catch(() => undefined); // not unhandled: whoever uses the store gets the error
    const db = new PostgresDb(pool, ready);
    const tenants = new CachedTenants(db, url);
    super(db, { versions: new PostgresVersions(db), tenants });
    this.cachedTenants = tenants;
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
  async reclaim(): Promise<number> { return 0; }

  private cluster_: PostgresCluster | null = null;

  /** What workers of a cluster share beyond the metadata (made, with its tables, on first use). */
  get cluster(): PostgresCluster {
    return (this.cluster_ ??= new PostgresCluster(this.db));
  }

  /**
   * Keeps API-key lookups in memory from now on, forgotten whenever any process changes keys or
   * tenants (tenants-cache.ts): for a server's long-lived store, not for a short-lived tool's.
   */
  async listen(): Promise<void> {
    await this.ready;
    await this.cachedTenants.listen();
  }

  async close(): Promise<void> {
    await this.cachedTenants.close();
    await this.ready.catch(() => undefined);
    await this.pool.end();
  }
}


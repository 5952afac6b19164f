import Database from 'better-sqlite3';
import { SqlMetadataStore } from '../sql/store.js';
import { MIGRATIONS } from './migrations.js';
import { SqliteDb } from './sqlite-db.js';

/**
 * A copy of the embedded store (`SqliteMetadataStore.snapshot`, a backup's metadata) opened to be
 * read: its repositories over one read-only connection, no migration, nothing written.
 */
export class SqliteSnapshot extends SqlMetadataStore {
  /** Its schema's number (`PRAGMA user_version`): a server reads a copy made by its own version or an older one. */
  readonly schema: number;
  private readonly raw: Database.Database;

  constructor(file: string) {
    const raw = new Database(file, { readonly: true, fileMustExist: true });
    super(new SqliteDb(raw));
    this.raw = raw;
    this.schema = raw.pragma('user_version', { simple: true }) as number;
  }

  /** How many rows of each kind the copy holds. */
  async counts(): Promise<{ tenants: number; contexts: number; versions: number }> {
    const n = (table: string) => (this.raw.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
    return { tenants: n('tenants'), contexts: n('contexts'), versions: n('versions') };
  }

  async sync(): Promise<void> { /* read only */ }
  async reclaim(): Promise<number> { return 0; }
  async close(): Promise<void> { this.raw.close(); }
}

/** The schema number this server's embedded store migrates to (how many migrations it has). */
export const SCHEMA_VERSION = MIGRATIONS.length;

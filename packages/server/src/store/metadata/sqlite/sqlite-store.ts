import { open, type FileHandle } from 'node:fs/promises';
import { statSync } from 'node:fs';
import Database from 'better-sqlite3';
import { SqlMetadataStore } from '../sql/store.js';
import { MIGRATIONS } from './migrations.js';
import { Checkpointer } from './checkpointer.js';
import { Reader } from './reader.js';
import { SqliteDb } from './sqlite-db.js';

/** Databases at most this large are vacuumed once to turn on incremental vacuum; larger ones are told how. */
const VACUUM_ONCE_BYTES = 256 << 20;

/**
 * The embedded metadata store: one SQLite file in WAL mode, one connection,
 * schema migrations counted by `PRAGMA user_version`, pages freed by
 * collection returned to the file system by incremental vacuum.
 */
export class SqliteMetadataStore extends SqlMetadataStore {
  private readonly raw: Database.Database;
  /** Why incremental vacuum is off (a large database from before it), for the server's log. */
  readonly vacuumNote: string | null = null;

  constructor(private readonly file: string) {
    const raw = new Database(file);
    // Only a database with no table yet takes this at once; older ones are vacuumed below.
    raw.pragma('auto_vacuum = INCREMENTAL');
    raw.pragma('journal_mode = WAL');
    raw.pragma('synchronous = NORMAL');
    raw.pragma('foreign_keys = ON');
    raw.pragma('busy_timeout = 5000');
    // A bounded page cache (the build's default is 16 MiB): memory must not follow how much history the file holds.
    raw.pragma('cache_size = -8192');
    // Checkpoints run in a worker thread (checkpointer.ts), never in a commit on the event loop.
    raw.pragma('wal_autocheckpoint = 0');
    migrate(raw);
    const reader = new Reader(file);
    super(new SqliteDb(raw, reader));
    this.raw = raw;
    this.reader = reader;
    this.checkpointer = new Checkpointer(file);
    if (raw.pragma('auto_vacuum', { simple: true }) !== 2) {
      const size = statSync(file).size;
      if (size <= VACUUM_ONCE_BYTES) raw.exec('VACUUM');
      else this.vacuumNote = `incremental vacuum is off for ${file} (${size} bytes): stop the server and run \`sqlite3 ${file} 'PRAGMA auto_vacuum = INCREMENTAL; VACUUM'\``;
    }
  }

  private wal: FileHandle | null = null;
  private readonly checkpointer: Checkpointer;
  private readonly reader: Reader;

  /**
   * In WAL mode with synchronous=NORMAL a commit writes its frames to the WAL
   * without fsync (a crash keeps them, a power loss may not); syncing the WAL
   * file makes every transaction committed so far durable, for many at once.
   */
  async sync(): Promise<void> {
    if (!this.wal) {
      try { this.wal = await open(`${this.file}-wal`, 'r'); } catch { return; } // nothing written yet
    }
    await this.wal.datasync();
  }

  /**
   * `VACUUM INTO` on the reader thread's read-only connection: one read transaction, so the copy
   * is the last committed state (never a transaction this connection has open), and no writer waits.
   */
  async snapshot(file: string): Promise<void> {
    await this.reader.run('VACUUM INTO ?', [file]);
  }

  /** Returns up to `maxPages` free pages to the file system (a bounded step: the collector paces them) and answers the free pages left. */
  async reclaim(maxPages: number): Promise<number> {
    if (this.raw.pragma('auto_vacuum', { simple: true }) !== 2) return 0;
    const pages = Math.max(1, Math.floor(maxPages));
    this.raw.pragma(`incremental_vacuum(${pages})`);
    return this.raw.pragma('freelist_count', { simple: true }) as number;
  }

  async close(): Promise<void> {
    await this.reader.close();
    await this.checkpointer.close();
    await this.wal?.close();
    this.raw.close();
  }
}

function migrate(db: Database.Database): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > MIGRATIONS.length) throw new Error(`database schema ${current} is newer than this server knows (${MIGRATIONS.length})`);
  for (let v = current; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}

import Database from 'better-sqlite3';
import type { Param, SqlDb } from '../sql/db.js';
import type { Reader } from './reader.js';

/** Prepared statements kept (the repositories have a few dozen fixed ones). */
const STATEMENT_CACHE = 128;

/**
 * The SQLite dialect over one better-sqlite3 connection. Statements run
 * synchronously; a transaction that awaits between statements holds a lock
 * that every other caller waits for, so nothing of theirs runs inside it.
 */
export class SqliteDb implements SqlDb {
  readonly dialect = 'sqlite' as const;
  private readonly statements = new Map<string, Database.Statement>();
  private tail: Promise<unknown> = Promise.resolve();
  /** Transactions queued or running. */
  private pending = 0;

  /** `reader`: where long reads (`scan`) run; without one, on this connection. */
  constructor(readonly db: Database.Database, private readonly reader?: Reader) {}

  /**
   * A prepared statement, from a cache of the most recently used: statements with lists of
   * parameters (`IN (?, ?, …)`) come in many lengths, and each cached one holds its compiled program.
   */
  private stmt(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (st) {
      this.statements.delete(sql); // most recent last
    } else {
      st = this.db.prepare(sql);
      if (this.statements.size >= STATEMENT_CACHE) this.statements.delete(this.statements.keys().next().value!);
    }
    this.statements.set(sql, st);
    return st;
  }

  /** Runs `fn` now when no transaction is queued or open (synchronously: nothing can come between); after them otherwise. */
  private outside<T>(fn: () => T): Promise<T> {
    if (this.pending === 0) {
      try { return Promise.resolve(fn()); } catch (e) { return Promise.reject(e); }
    }
    return this.tail.then(fn, fn);
  }

  all<T>(sql: string, params: readonly Param[] = []): Promise<T[]> { return this.outside(() => this.stmt(sql).all(...params) as T[]); }
  get<T>(sql: string, params: readonly Param[] = []): Promise<T | undefined> { return this.outside(() => this.stmt(sql).get(...params) as T | undefined); }
  run(sql: string, params: readonly Param[] = []): Promise<number> { return this.outside(() => this.stmt(sql).run(...params).changes); }
  scan<T>(sql: string, params: readonly Param[] = []): Promise<T[]> { return this.reader ? this.reader.all<T>(sql, params) : this.all<T>(sql, params); }

  tx<T>(fn: (db: SqlDb) => Promise<T>): Promise<T> {
    const inner: SqlDb = {
      dialect: 'sqlite',
      all: async <R>(sql: string, params: readonly Param[] = []) => this.stmt(sql).all(...params) as R[],
      get: async <R>(sql: string, params: readonly Param[] = []) => this.stmt(sql).get(...params) as R | undefined,
      run: async (sql, params = []) => this.stmt(sql).run(...params).changes,
      scan: (sql, params) => inner.all(sql, params),
      tx: (f) => f(inner), // already in one
    };
    const run = async () => {
      this.db.exec('BEGIN IMMEDIATE');
      try {
        const r = await fn(inner);
        this.db.exec('COMMIT');
        return r;
      } catch (e) {
        if (this.db.inTransaction) this.db.exec('ROLLBACK');
        throw e;
      }
    };
    this.pending++;
    const result = this.tail.then(run, run).finally(() => { this.pending--; });
    this.tail = result.catch(() => undefined);
    return result;
  }
}

/**
 * What the metadata store's SQL needs of a database: a dialect, not a fork
 * (Kysely's idea). Repositories (sql/*.ts) are written once against it in the
 * SQL both SQLite and Postgres speak: `?` placeholders (a dialect renumbers
 * them), `ON CONFLICT … DO NOTHING/UPDATE`, `WITH RECURSIVE`, integers for
 * booleans, JSON kept as text. Dialects: sqlite/ (better-sqlite3), postgres/.
 */
export type Param = string | number | null;

export interface SqlDb {
  readonly dialect: 'sqlite' | 'postgres';
  all<T>(sql: string, params?: readonly Param[]): Promise<T[]>;
  get<T>(sql: string, params?: readonly Param[]): Promise<T | undefined>;
  /** Rows changed. */
  run(sql: string, params?: readonly Param[]): Promise<number>;
  /**
   * A read that may take long because it reads much (a report over the ledger, a collection's
   * search over all versions): SQLite runs it on a worker thread's read-only connection (the last
   * committed state), so nothing else waits for it; Postgres, like `all`. Inside a transaction, `all`.
   */
  scan<T>(sql: string, params?: readonly Param[]): Promise<T[]>;
  /**
   * Runs `fn` in one transaction that behaves as if no other ran at the same
   * time (SQLite: BEGIN IMMEDIATE, one writer at a time; Postgres:
   * SERIALIZABLE on one pooled connection); commits if `fn` resolves, rolls
   * back if it throws. `fn` may run more than once (Postgres runs a
   * transaction again after a serialization failure or deadlock): it keeps
   * its effects in the database and hands what it did back as its result.
   */
  tx<T>(fn: (db: SqlDb) => Promise<T>): Promise<T>;
}

/** `?, ?, …` for n parameters. */
export const marks = (n: number) => Array.from({ length: n }, () => '?').join(', ');

/** Runs `fn` over `items` in chunks small enough for any dialect's parameter limit. */
export async function chunked<T, R>(items: readonly T[], size: number, fn: (chunk: T[]) => Promise<R[]>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += size) out.push(...(await fn(items.slice(i, i + size))));
  return out;
}

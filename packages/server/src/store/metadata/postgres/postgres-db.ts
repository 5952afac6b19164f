import pg from 'pg';
import { ShellbaseError } from '../../../errors.js';
import { isBackground } from '../../../util/background.js';
import type { Param, SqlDb } from '../sql/db.js';

/** SQLSTATEs after which Postgres has rolled the work back and running it again is the cure: serialization_failure, deadlock_detected. */
const RETRY_CODES = new Set(['40001', '40P01']);
/** Attempts before a failure is surfaced (with 16 workers committing to one context, a handful are needed at most). */
const MAX_ATTEMPTS = 30;
/** A connection not made by then fails (a host that drops packets would otherwise hold requests forever). */
const CONNECT_TIMEOUT_MS = 10_000;
/**
 * A request's statement not answered by then fails, and its connection is discarded: across a
 * partition a sent statement would otherwise wait for TCP to give up (minutes). A request's
 * statements take milliseconds; background work's (util/background.ts: collection's walks over a
 * large tenant's history, squashes) may take longer and get BACKGROUND_QUERY_TIMEOUT_MS; waits
 * for a lock (`exclusive`) pass a longer one of their own.
 */
export const QUERY_TIMEOUT_MS = 15_000;
const BACKGROUND_QUERY_TIMEOUT_MS = 300_000;
/** Idle pooled connections are probed by TCP keepalive after this long, so a dead peer is found before a statement meets it. */
const KEEPALIVE_MS = 10_000;
/** Texts with `?` renumbered, kept (the repositories have a few dozen fixed statements; IN lists come in many lengths). */
const TEXT_CACHE = 256;

const isRetryable = (e: unknown) => RETRY_CODES.has((e as { code?: string } | null)?.code ?? '');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Full jitter over an exponential ceiling: 2, 4, … 128 ms. */
const backoff = (attempt: number) => sleep(Math.random() * 2 ** Math.min(attempt + 1, 7));

/**
 * Numbers come back as numbers, as SQLite's do: BIGINT (counts, bytes, milliseconds, SUM of
 * integers) and NUMERIC (SUM and division results) would otherwise arrive as strings. Every such
 * value the store keeps is below 2^53.
 */
const TYPES = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
    if (oid === pg.types.builtins.INT8 || oid === pg.types.builtins.NUMERIC) return (text: string) => Number(text);
    return pg.types.getTypeParser(oid, format);
  }) as typeof pg.types.getTypeParser,
};

export interface PostgresDbOptions {
  /** Connections in the pool (pg's default is 10). */
  max?: number;
  /** Told of an idle connection's error (the pool drops that connection and opens another when needed). */
  onError?: (err: Error) => void;
}

/**
 * The Postgres dialect over a pg pool. `?` placeholders become `$1…$n` (outside quoted text).
 *
 * Concurrency: every `tx` runs at SERIALIZABLE on one pooled connection, and is run again from
 * the start when Postgres aborts it with a serialization failure or a deadlock (40001, 40P01).
 * So transactions behave as if they ran one at a time in some order, which is what SQLite's
 * BEGIN IMMEDIATE (one writer at a time) gives the repositories (sql/*.ts): they were written
 * against that, and need no locking of their own. A head moves by compare-and-set
 * (`UPDATE contexts … WHERE head = expected`): of two transactions that move one head, the second
 * to write waits for the first and is then aborted (first updater wins), runs again, finds the
 * head moved and reports it. The alternative, READ COMMITTED with `SELECT … FOR UPDATE` where a
 * transaction relies on what it read, would need every repository audited and kept so; with
 * SERIALIZABLE a transaction that contends on a hot row costs a retry instead of a wait.
 * Statements outside `tx` are each atomic at the database's default isolation, retried the same
 * way (a statement that failed changed nothing).
 */
export class PostgresDb implements SqlDb {
  readonly dialect = 'postgres' as const;
  private readonly texts = new Map<string, string>();
  /** Transactions and statements run again after a serialization failure or deadlock, since the start. */
  retries = 0;
  /**
   * Round trips to Postgres since the start: each statement, BEGIN, COMMIT and ROLLBACK is one
   * (pg sends a statement and waits for its answer before the next). Background work
   * (util/background.ts: heartbeats, garbage collection, squashes) is counted apart from
   * requests. GET /metrics serves them (shellbase_metadata_round_trips_total).
   */
  readonly roundTrips = { request: 0, background: 0 };

  /** Statements wait for `ready` (the store's migrations) and fail with its error. */
  constructor(readonly pool: pg.Pool, private readonly ready: Promise<void> = Promise.resolve()) {}

  /** Resolves once the store's migrations ran (rejects with their error). */
  whenReady(): Promise<void> { return this.ready; }

  /** A pool for `url` whose numbers come back as numbers. */
  static pool(url: string, options: PostgresDbOptions = {}): pg.Pool {
    const pool = new pg.Pool({
      connectionString: url, max: options.max ?? 10, types: TYPES, connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      query_timeout: QUERY_TIMEOUT_MS, keepAlive: true, keepAliveInitialDelayMillis: KEEPALIVE_MS,
    });
    pool.on('error', options.onError ?? ((err) => process.emitWarning(`postgres: an idle connection failed: ${err.message}`)));
    return pool;
  }

  /** Counts one round trip (callers that talk to the pool's clients themselves count theirs). */
  countRoundTrip(): void {
    this.roundTrips[isBackground() ? 'background' : 'request']++;
  }

  /** `sql` with its `?` placeholders numbered `$1…$n` (a `?` inside quotes is text, not a placeholder). */
  text(sql: string): string {
    let out = this.texts.get(sql);
    if (out !== undefined) return out;
    out = renumber(sql);
    if (this.texts.size >= TEXT_CACHE) this.texts.delete(this.texts.keys().next().value!);
    this.texts.set(sql, out);
    return out;
  }

  private async query<T>(sql: string, params: readonly Param[], client?: pg.ClientBase): Promise<pg.QueryResult & { rows: T[] }> {
    const config = { text: this.text(sql), values: params as Param[], query_timeout: isBackground() ? BACKGROUND_QUERY_TIMEOUT_MS : QUERY_TIMEOUT_MS } as pg.QueryConfig;
    if (client) {
      this.countRoundTrip();
      return client.query(config);
    }
    await this.ready;
    for (let attempt = 0; ; attempt++) {
      try {
        this.countRoundTrip();
        return await this.pool.query(config);
      } catch (e) {
        if (!isRetryable(e) || attempt + 1 >= MAX_ATTEMPTS) throw e;
        this.retries++;
        await backoff(attempt);
      }
    }
  }

  async all<T>(sql: string, params: readonly Param[] = []): Promise<T[]> { return (await this.query<T>(sql, params).catch(down)).rows; }
  scan<T>(sql: string, params: readonly Param[] = []): Promise<T[]> { return this.all<T>(sql, params); }
  async get<T>(sql: string, params: readonly Param[] = []): Promise<T | undefined> { return (await this.query<T>(sql, params).catch(down)).rows[0]; }
  async run(sql: string, params: readonly Param[] = []): Promise<number> { return (await this.query(sql, params).catch(down)).rowCount ?? 0; }

  /**
   * `fn` may run more than once (see above): it must keep its effects in the database and return
   * its result. A database that cannot be reached fails it with `unavailable`.
   */
  tx<T>(fn: (db: SqlDb) => Promise<T>): Promise<T> {
    return this.txOnce(fn).catch(down);
  }

  private async txOnce<T>(fn: (db: SqlDb) => Promise<T>): Promise<T> {
    await this.ready;
    const { client, release } = await checkOut(this.pool);
    let broken: unknown = undefined;
    try {
      const inner: SqlDb = {
        dialect: 'postgres',
        all: async <R>(sql: string, params: readonly Param[] = []) => (await this.query<R>(sql, params, client)).rows,
        get: async <R>(sql: string, params: readonly Param[] = []) => (await this.query<R>(sql, params, client)).rows[0],
        run: async (sql, params = []) => (await this.query(sql, params, client)).rowCount ?? 0,
        scan: (sql, params) => inner.all(sql, params),
        tx: (f) => f(inner), // already in one
      };
      for (let attempt = 0; ; attempt++) {
        try {
          this.countRoundTrip();
          await client.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
        } catch (e) {
          broken = e;
          throw e;
        }
        try {
          const result = await fn(inner);
          this.countRoundTrip();
          await client.query('COMMIT');
          return result;
        } catch (e) {
          // A statement left unanswered holds the connection: it is discarded, not rolled back on.
          if (timedOut(e)) { broken = e; throw e; }
          try {
            this.countRoundTrip();
            await client.query('ROLLBACK');
          } catch (rollback) {
            broken = rollback; // the connection is gone: the pool must not hand it out again
            throw e;
          }
          if (!isRetryable(e) || attempt + 1 >= MAX_ATTEMPTS) throw e;
          this.retries++;
          await backoff(attempt);
        }
      }
    } finally {
      release(broken);
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

/**
 * A pooled connection for work of several statements. While a connection is checked out the pool
 * does not listen for its errors, so one the server ends between two statements (a restart, an
 * administrator's command) would emit an unhandled 'error' and end the process. Here the error is
 * kept (the next statement on the connection fails anyway) and the connection goes back to the
 * pool as broken, which discards it.
 */
export async function checkOut(pool: pg.Pool): Promise<{ client: pg.PoolClient; release: (err?: unknown) => void }> {
  const client = await pool.connect();
  let lost: Error | undefined;
  const onError = (e: Error) => { lost = e; };
  client.on('error', onError);
  return {
    client,
    release(err?: unknown) {
      client.off('error', onError);
      client.release(err instanceof Error ? err : lost);
    },
  };
}

/** SQLSTATEs and socket errors that mean the database is down, restarting or unreachable (not that a statement was wrong). */
const DOWN_CODES = new Set(['57P01', '57P02', '57P03', '53300', 'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/** Rethrows a lost or refused connection as `unavailable` (503: retry later); anything else as it is. */
function down(e: unknown): never {
  const code = (e as { code?: unknown } | null)?.code;
  const message = (e as Error | null)?.message ?? String(e);
  const isDown = (typeof code === 'string' && (DOWN_CODES.has(code) || code.startsWith('08')))
    || timedOut(e) || /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(message);
  if (!isDown) throw e;
  throw new ShellbaseError('unavailable', `the metadata database cannot be reached: ${message}`, {
    hint: 'retry shortly; if it lasts, check that Postgres is up and reachable from this worker', cause: e,
  });
}

/** SQLSTATEs and socket errors after which the statement surely did not run: no connection was made, or the server was shutting down. */
const NOT_SENT_CODES = new Set(['57P01', '57P02', '57P03', 'ECONNREFUSED', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * Whether a failure (as `down` rethrew it) says the statement never ran: running it again cannot
 * do it twice. A timeout, a reset or a connection cut mid-statement are not: it may have run.
 */
export function neverSent(e: unknown): boolean {
  const cause = e instanceof ShellbaseError ? (e as { cause?: unknown }).cause : e;
  const code = (cause as { code?: unknown } | null)?.code;
  return (typeof code === 'string' && NOT_SENT_CODES.has(code)) || /timeout exceeded when trying to connect/.test((cause as Error | null)?.message ?? '');
}

/** pg's error for a statement unanswered within its `query_timeout`. */
function timedOut(e: unknown): boolean {
  return (e as Error | null)?.message === 'Query read timeout';
}

/** Numbers each `?` outside single-quoted text and double-quoted names. */
export function renumber(sql: string): string {
  let out = '';
  let n = 0;
  let quote: string | null = null;
  for (const ch of sql) {
    if (quote) {
      if (ch === quote) quote = null; // a doubled quote closes and reopens: the same result
      out += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      out += ch;
    } else if (ch === '?') {
      out += `$${++n}`;
    } else {
      out += ch;
    }
  }
  return out;
}

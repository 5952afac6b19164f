import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { Param } from '../sql/db.js';

const require = createRequire(import.meta.url);

/**
 * Long reads off the event loop. better-sqlite3 runs a statement on the calling thread, so a
 * read over months of history (a usage report over the ledger, a collection's search for old
 * versions among a million) would hold every other request for as long as it takes. Those reads
 * go to a worker thread with a read-only connection of its own instead; in WAL mode it reads the
 * last committed state and waits for no writer. Statements run one at a time, in order.
 */
export class Reader {
  private readonly worker: Worker;
  private next = 1;
  private readonly waiting = new Map<number, { resolve(rows: unknown[]): void; reject(e: Error): void }>();

  constructor(file: string) {
    const source = `
      const { parentPort, workerData } = require('node:worker_threads');
      const Database = require(workerData.module);
      const db = new Database(workerData.file, { readonly: true });
      db.pragma('busy_timeout = 5000');
      db.pragma('cache_size = -8192');
      const statements = new Map();
      parentPort.on('message', (m) => {
        if (m === 'close') { db.close(); parentPort.postMessage({ closed: true }); return; }
        try {
          let st = statements.get(m.sql);
          if (!st) { st = db.prepare(m.sql); if (statements.size >= 64) statements.clear(); statements.set(m.sql, st); }
          parentPort.postMessage({ id: m.id, rows: m.run ? (st.run(...m.params), []) : st.all(...m.params) });
        } catch (e) {
          parentPort.postMessage({ id: m.id, error: { message: e.message, code: e.code } });
        }
      });
    `;
    this.worker = new Worker(source, { eval: true, workerData: { file, module: require.resolve('better-sqlite3') } });
    this.worker.on('message', (m: { id?: number; rows?: unknown[]; error?: { message: string; code?: string }; closed?: boolean }) => {
      if (m.closed) { this.closed?.(); return; }
      const w = m.id === undefined ? undefined : this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id!);
      if (this.waiting.size === 0) this.worker.unref();
      if (m.error) w.reject(Object.assign(new Error(m.error.message), { code: m.error.code }));
      else w.resolve(m.rows ?? []);
    });
    this.worker.on('error', (err) => this.failAll(err));
    this.worker.on('exit', () => this.failAll(new Error('the SQLite reader thread exited')));
    this.worker.unref();
  }

  all<T>(sql: string, params: readonly Param[]): Promise<T[]> {
    return this.send<T>(sql, params, false);
  }

  /** A statement that returns no rows (`VACUUM INTO`: a copy of the last committed state). */
  async run(sql: string, params: readonly Param[]): Promise<void> {
    await this.send(sql, params, true);
  }

  private send<T>(sql: string, params: readonly Param[], run: boolean): Promise<T[]> {
    const id = this.next++;
    return new Promise<T[]>((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (rows: unknown[]) => void, reject });
      this.worker.ref(); // an answer awaited keeps the process alive; an idle reader does not
      this.worker.postMessage({ id, sql, params, run });
    });
  }

  private failAll(err: Error): void {
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
  }

  private closed: (() => void) | null = null;

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => {
      this.closed = resolve;
      this.worker.once('exit', () => resolve());
    });
    this.worker.ref(); // the answer is awaited
    this.worker.postMessage('close');
    await closed;
    await this.worker.terminate();
  }
}

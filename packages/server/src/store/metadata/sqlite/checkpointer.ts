import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

const require = createRequire(import.meta.url);

/**
 * Moves SQLite's WAL checkpoints off the event loop. With auto-checkpoints a
 * commit that finds the WAL past 1,000 pages copies them into the database
 * (and syncs it) before it returns, on the server's one thread: tens of
 * milliseconds at a time under write load. Instead the server's connection
 * never checkpoints, and a worker thread with a connection of its own runs a
 * PASSIVE checkpoint every `everyMs` (it waits for no reader or writer).
 */
export class Checkpointer {
  private readonly worker: Worker;

  constructor(file: string, everyMs = 1000) {
    const source = `
      const { parentPort, workerData } = require('node:worker_threads');
      const Database = require(workerData.module);
      const db = new Database(workerData.file);
      db.pragma('busy_timeout = 5000');
      db.pragma('cache_size = -1024'); // a checkpoint reads each page once: no cache worth keeping
      const step = () => { try { db.pragma('wal_checkpoint(PASSIVE)'); } catch { /* busy: the next one */ } };
      const timer = setInterval(step, workerData.everyMs);
      parentPort.on('message', (m) => { if (m === 'close') { clearInterval(timer); step(); db.close(); parentPort.postMessage('closed'); } });
    `;
    this.worker = new Worker(source, { eval: true, workerData: { file, everyMs, module: require.resolve('better-sqlite3') } });
    this.worker.unref();
  }

  /** A last checkpoint, then the worker's connection closes. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => {
      this.worker.once('message', () => resolve());
      this.worker.once('exit', () => resolve());
    });
    this.worker.ref(); // the answer is awaited
    this.worker.postMessage('close');
    await closed;
    await this.worker.terminate();
  }
}

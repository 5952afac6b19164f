import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { SBX_STORE } from '../../../util/native.js';

/** What `sbx-store serve` answered: its code (0 done, 3 a path too deep, 125 failed) and bytes. */
export interface StoreAnswer {
  code: number;
  body: Buffer;
}

type Op = 'scan' | 'sync' | 'clear' | 'scratch' | 'limit' | 'delete';

/**
 * `sbx-store serve` (native/serve.c): the store operations of every query (make a scratch and set
 * its limit, scan it, clear what sits beside its tree, sync the file system, delete a scratch or
 * a layer), answered by one
 * long-running process, so that a query starts no process but its sandbox. One per server process: started at the first request (a
 * snapshotter asks for it when it opens), and again at the next request if it died; requests
 * pending when it died fail.
 */
class StoreServer {
  private child: ChildProcess | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (a: StoreAnswer) => void; reject: (e: Error) => void }>();
  /** The answer being read: its header's fields, and its body so far. */
  private head = '';
  private current: { id: number; code: number; body: Buffer; filled: number } | null = null;

  /** The process's pid while it runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Starts the process now rather than at the first request. */
  start(): void {
    this.child ??= this.spawn();
  }

  /** `numbers`: scratch's ROOTID and LIMIT_MB, limit's LIMIT_MB (whole numbers). */
  request(op: Op, dir: string, numbers: readonly number[] = []): Promise<StoreAnswer> {
    if (/[\n\0]/.test(dir)) return Promise.reject(new Error(`sbx-store serve: a path with a newline or NUL: ${JSON.stringify(dir)}`));
    const child = this.child ??= this.spawn();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      // The pipe keeps the process alive only while an answer is awaited.
      if (this.pending.size === 1) (child.stdout as Socket).ref();
      child.stdin!.write(`${[id, op, ...numbers, dir].join(' ')}\n`);
    });
  }

  private spawn(): ChildProcess {
    const child = spawn(SBX_STORE, ['serve'], { stdio: ['pipe', 'pipe', 'inherit'] });
    child.unref();
    (child.stdout as Socket).unref();
    (child.stdin as Socket).unref();
    child.stdin!.on('error', () => undefined);
    child.stdout!.on('data', (chunk: Buffer) => this.onData(chunk));
    const gone = (why: string) => {
      if (this.child !== child) return;
      this.child = null;
      this.head = '';
      this.current = null;
      const err = new Error(`sbx-store serve ${why}`);
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
    child.once('error', (e) => gone(`failed: ${e.message}`));
    child.once('exit', (code, signal) => gone(`exited (${code ?? signal})`));
    return child;
  }

  private onData(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (!this.current) {
        const nl = chunk.indexOf(10, at);
        if (nl === -1) { this.head += chunk.toString('latin1', at); return; }
        const [id, code, len] = (this.head + chunk.toString('latin1', at, nl)).split(' ').map(Number);
        this.head = '';
        at = nl + 1;
        this.current = { id, code, body: Buffer.allocUnsafe(len), filled: 0 };
      }
      const c = this.current;
      const n = Math.min(c.body.length - c.filled, chunk.length - at);
      chunk.copy(c.body, c.filled, at, at + n);
      c.filled += n;
      at += n;
      if (c.filled < c.body.length) return;
      this.current = null;
      const p = this.pending.get(c.id);
      this.pending.delete(c.id);
      if (this.pending.size === 0 && this.child) (this.child.stdout as Socket).unref();
      p?.resolve({ code: c.code, body: c.body });
    }
  }
}

export const storeServer = new StoreServer();

/** Asks `sbx-store serve` for `op` on `dir`; anything but code 0 throws (`scan` has its own codes: use `storeServer`). */
export async function storeOp(op: Exclude<Op, 'scan'>, dir: string, numbers: readonly number[] = []): Promise<void> {
  const a = await storeServer.request(op, dir, numbers);
  if (a.code !== 0) throw new Error(`sbx-store ${[op, ...numbers, dir].join(' ')} failed (${a.code}): ${a.body.toString()}`);
}

import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { SBX_STORE } from '../../../util/native.js';

/**
 * What `sbx-store serve` answered: its code (0 done; 3 a path too deep, from a scan; 1 or 2 a
 * scratch or limit that failed or was asked wrongly; 125 failed) and its bytes (a scan's output,
 * else what went wrong).
 */
export interface StoreAnswer {
  code: number;
  body: Buffer;
}

type Op = 'scan' | 'sync' | 'clear' | 'scratch' | 'limit' | 'delete';
type Pending = { resolve: (a: StoreAnswer) => void; reject: (e: Error) => void };

/** A header `ID CODE LENGTH`: whole numbers, the length at most this (a scan of a huge tree stays far below). */
const MAX_ANSWER = 1 << 30;

/** One `sbx-store serve` process, with the requests it was sent and the answer it is reading. */
class Helper {
  readonly child: ChildProcess;
  readonly pending = new Map<number, Pending>();
  private head = '';
  private current: { id: number; code: number; body: Buffer; filled: number } | null = null;
  private dead = false;

  constructor(private readonly onGone: () => void) {
    const child = spawn(SBX_STORE, ['serve'], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.child = child;
    child.unref();
    (child.stdout as Socket).unref();
    (child.stdin as Socket).unref();
    child.stdin!.on('error', () => undefined);
    child.stdout!.on('data', (chunk: Buffer) => this.onData(chunk));
    child.once('error', (e) => this.gone(`failed: ${e.message}`));
    // 'close', not 'exit': answers written before it ended are read first.
    child.once('close', (code, signal) => this.gone(`exited (${code ?? signal})`));
  }

  send(id: number, line: string, p: Pending): void {
    this.pending.set(id, p);
    // The pipe keeps the server's process alive only while an answer is awaited.
    if (this.pending.size === 1) (this.child.stdout as Socket).ref();
    this.child.stdin!.write(line);
  }

  private gone(why: string): void {
    if (this.dead) return;
    this.dead = true;
    this.onGone();
    this.child.kill('SIGKILL');
    const err = new Error(`sbx-store serve ${why}`);
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }

  private onData(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length && !this.dead) {
      if (!this.current) {
        const nl = chunk.indexOf(10, at);
        if (nl === -1) { this.head += chunk.toString('latin1', at); return; }
        const head = this.head + chunk.toString('latin1', at, nl);
        this.head = '';
        at = nl + 1;
        const f = /^(\d{1,15}) (\d{1,3}) (\d{1,10})$/.exec(head);
        if (!f || Number(f[3]) > MAX_ANSWER) { this.gone(`answered what is no answer: ${JSON.stringify(head.slice(0, 100))}`); return; }
        this.current = { id: Number(f[1]), code: Number(f[2]), body: Buffer.allocUnsafe(Number(f[3])), filled: 0 };
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
      if (this.pending.size === 0) (this.child.stdout as Socket).unref();
      p?.resolve({ code: c.code, body: c.body });
    }
  }
}

/**
 * `sbx-store serve` (native/serve.c): the store operations of every query (make a scratch and set
 * its limit, scan it, clear what sits beside its tree, sync the file system, delete a scratch or
 * a layer), answered by one long-running process, so that a query starts no process but its
 * sandbox. One per server process: started at the first request (a snapshotter asks for it when
 * it opens), and again at the next request if it died; the requests it had then fail (a scratch
 * it was making may be left: the next start removes every scratch).
 */
class StoreServer {
  private helper: Helper | null = null;
  private nextId = 1;

  /** The process's pid while it runs. */
  get pid(): number | undefined {
    return this.helper?.child.pid;
  }

  /** Starts the process now rather than at the first request. */
  start(): void {
    this.running();
  }

  /** `numbers`: scratch's ROOTID and LIMIT_MB, limit's LIMIT_MB (whole numbers). */
  request(op: Op, dir: string, numbers: readonly number[] = []): Promise<StoreAnswer> {
    if (/[\n\0]/.test(dir)) return Promise.reject(new Error(`sbx-store serve: a path with a newline or NUL: ${JSON.stringify(dir)}`));
    if (!numbers.every((n) => Number.isSafeInteger(n) && n >= 0)) return Promise.reject(new Error(`sbx-store serve: not whole numbers: ${numbers.join(' ')}`));
    const helper = this.running();
    const id = this.nextId++;
    return new Promise((resolve, reject) => helper.send(id, `${[id, op, ...numbers, dir].join(' ')}\n`, { resolve, reject }));
  }

  private running(): Helper {
    const helper = this.helper ?? new Helper(() => { if (this.helper === helper) this.helper = null; });
    this.helper = helper;
    return helper;
  }
}

export const storeServer = new StoreServer();

/** Asks `sbx-store serve` for `op` on `dir`; anything but code 0 throws (`scan` has its own codes: use `storeServer`). */
export async function storeOp(op: Exclude<Op, 'scan'>, dir: string, numbers: readonly number[] = []): Promise<void> {
  const a = await storeServer.request(op, dir, numbers);
  if (a.code !== 0) throw new Error(`sbx-store ${[op, ...numbers, dir].join(' ')} failed (${a.code}): ${a.body.toString()}`);
}

import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { constants } from 'node:os';
import { SBX_SPAWNER } from './native.js';

export interface SpawnHandlers {
  onStdout(chunk: Buffer): void;
  onStderr(chunk: Buffer): void;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Spawned {
  /** Resolves once the process ended and both of its output streams closed. */
  exited: Promise<Exit>;
  /** The process's pid, once it started. */
  pid: Promise<number>;
  kill(): void;
  /** Stops forwarding a stream (its bytes are still read and dropped by the spawner). */
  discard(stream: 1 | 2): void;
}

interface Pending extends SpawnHandlers {
  started(pid: number): void;
  resolve(exit: Exit): void;
  reject(err: Error): void;
}

const SIGNALS = new Map<number, NodeJS.Signals>(
  Object.entries(constants.signals).map(([name, n]) => [n, name as NodeJS.Signals]),
);

/**
 * Starts processes through `sbx-spawner`, one long-lived small process that
 * forks on our behalf, so the server (whose fork would copy a large address
 * space on the event loop) never forks per query or per helper tool. Frames
 * are described in native/spawner.c. Programs are looked up in PATH.
 */
export class Spawner {
  private child: ChildProcessByStdio<Writable, Readable, null> | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private buffered: Buffer = Buffer.alloc(0);

  private ensure(): ChildProcessByStdio<Writable, Readable, null> {
    if (this.child) return this.child;
    const child = spawn(SBX_SPAWNER, [], { stdio: ['pipe', 'pipe', 'inherit'] });
    // Only pending work keeps the process alive (a one-shot CLI command must be able to exit).
    child.unref();
    (child.stdout as unknown as { unref(): void }).unref();
    child.stdout.on('data', (c: Buffer) => this.onData(c));
    child.on('exit', () => {
      if (this.child === child) this.child = null;
      this.buffered = Buffer.alloc(0);
      for (const p of this.pending.values()) p.reject(new Error('sbx-spawner exited'));
      this.pending.clear();
    });
    child.stdin.on('error', () => undefined);
    this.child = child;
    return child;
  }

  start(argv: string[], stdin: string | undefined, handlers: SpawnHandlers): Spawned {
    const child = this.ensure();
    const id = this.nextId++ >>> 0;
    const input = Buffer.from(stdin ?? '');
    const args = Buffer.from(argv.map((a) => `${a}\0`).join('') + '\0');
    const len = Buffer.alloc(4);
    len.writeUInt32LE(input.length);
    let started: (pid: number) => void = () => undefined;
    const pid = new Promise<number>((resolve) => { started = resolve; });
    const exited = new Promise<Exit>((resolve, reject) => this.pending.set(id, { ...handlers, started, resolve, reject }));
    this.hold(child, true);
    child.stdin.write(frame(id, 'S', Buffer.concat([args, len, input])));
    return {
      exited,
      pid,
      kill: () => { if (this.pending.has(id)) child.stdin.write(frame(id, 'K')); },
      discard: (stream) => { if (this.pending.has(id)) child.stdin.write(frame(id, 'D', Buffer.from(String(stream)))); },
    };
  }

  private onData(chunk: Buffer): void {
    this.buffered = this.buffered.length ? Buffer.concat([this.buffered, chunk]) : chunk;
    let off = 0;
    while (this.buffered.length - off >= 9) {
      const len = this.buffered.readUInt32LE(off + 5);
      if (this.buffered.length - off < 9 + len) break;
      const id = this.buffered.readUInt32LE(off);
      const type = String.fromCharCode(this.buffered[off + 4]);
      const payload = this.buffered.subarray(off + 9, off + 9 + len);
      off += 9 + len;
      const p = this.pending.get(id);
      if (!p) continue;
      if (type === 'P') p.started(payload.readUInt32LE(0));
      else if (type === '1') p.onStdout(payload);
      else if (type === '2') p.onStderr(payload);
      else if (type === 'X') { this.pending.delete(id); p.resolve(decodeStatus(payload.readInt32LE(0))); }
      else if (type === 'F') { this.pending.delete(id); p.reject(new Error(`spawn failed: errno ${payload.readUInt32LE(0)}`)); }
    }
    if (this.pending.size === 0 && this.child) this.hold(this.child, false);
    this.buffered = this.buffered.subarray(off);
  }

  private hold(child: ChildProcessByStdio<Writable, Readable, null>, on: boolean): void {
    const out = child.stdout as unknown as { ref(): void; unref(): void };
    if (on) out.ref(); else out.unref();
  }
}

function frame(id: number, type: string, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUInt32LE(id, 0);
  head.write(type, 4, 'latin1');
  head.writeUInt32LE(payload.length, 5);
  return Buffer.concat([head, payload]);
}

/** A raw wait(2) status as Node reports child exits. */
function decodeStatus(status: number): Exit {
  const sig = status & 0x7f;
  if (sig === 0) return { code: (status >> 8) & 0xff, signal: null };
  return { code: null, signal: SIGNALS.get(sig) ?? 'SIGKILL' };
}

/** The process-wide spawner that helper tools (`run` in util/proc.ts) and sandboxes share. */
export const spawner = new Spawner();

import { spawn } from 'node:child_process';
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

/** A byte stream to a spawner: the local `sbx-spawner` process, or a machine's guest agent. */
export interface SpawnerChannel {
  write(frame: Buffer): void;
  /** Whether pending work keeps the Node process alive. */
  ref(on: boolean): void;
  close(): void;
}

export type OpenChannel = (onData: (chunk: Buffer) => void, onClose: (why: string) => void) => SpawnerChannel;

/** The local fork server, a child process of ours. */
const localSpawner: OpenChannel = (onData, onClose) => {
  const child = spawn(SBX_SPAWNER, [], { stdio: ['pipe', 'pipe', 'inherit'] });
  // Only pending work keeps the process alive (a one-shot CLI command must be able to exit).
  child.unref();
  const out = child.stdout as unknown as { ref(): void; unref(): void };
  out.unref();
  child.stdout.on('data', onData);
  child.on('exit', () => onClose('sbx-spawner exited'));
  child.stdin.on('error', () => undefined);
  return {
    write: (f) => { child.stdin.write(f); },
    ref: (on) => { if (on) out.ref(); else out.unref(); },
    close: () => { child.stdin.end(); },
  };
};

/**
 * Starts processes through a spawner speaking the frames of native/spawner.c.
 * Locally that is `sbx-spawner`, one long-lived small process that forks on
 * our behalf, so the server (whose fork would copy a large address space on
 * the event loop) never forks per query or per helper tool; in a machine it
 * is the same program as the guest agent. Programs are looked up in PATH.
 */
export class Spawner {
  private child: SpawnerChannel | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private buffered: Buffer = Buffer.alloc(0);

  constructor(private readonly open: OpenChannel = localSpawner) {}

  private ensure(): SpawnerChannel {
    if (this.child) return this.child;
    const child: SpawnerChannel = this.open((c) => this.onData(c), (why) => {
      if (this.child === child) this.child = null;
      this.buffered = Buffer.alloc(0);
      for (const p of this.pending.values()) p.reject(new Error(why));
      this.pending.clear();
    });
    this.child = child;
    return child;
  }

  /** Drops the channel (pending work fails); the next start opens a new one. */
  close(): void {
    this.child?.close();
  }

  start(argv: string[], stdin: string | Buffer | undefined, handlers: SpawnHandlers): Spawned {
    const child = this.ensure();
    const id = this.nextId++ >>> 0;
    const input = Buffer.isBuffer(stdin) ? stdin : Buffer.from(stdin ?? '');
    const args = Buffer.from(argv.map((a) => `${a}\0`).join('') + '\0');
    const len = Buffer.alloc(4);
    len.writeUInt32LE(input.length);
    let started: (pid: number) => void = () => undefined;
    const pid = new Promise<number>((resolve) => { started = resolve; });
    const exited = new Promise<Exit>((resolve, reject) => this.pending.set(id, { ...handlers, started, resolve, reject }));
    child.ref(true);
    child.write(frame(id, 'S', Buffer.concat([args, len, input])));
    return {
      exited,
      pid,
      kill: () => { if (this.pending.has(id)) child.write(frame(id, 'K')); },
      discard: (stream) => { if (this.pending.has(id)) child.write(frame(id, 'D', Buffer.from(String(stream)))); },
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
    if (this.pending.size === 0 && this.child) this.child.ref(false);
    this.buffered = this.buffered.subarray(off);
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

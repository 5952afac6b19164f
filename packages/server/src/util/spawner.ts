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
  /** The caller detached before the end (code and signal are then null). */
  detached?: true;
}

export interface Spawned {
  /** Resolves once the process ended and both of its output streams closed. */
  exited: Promise<Exit>;
  /** The process's pid, once it started (rejects when it could not start). */
  pid: Promise<number>;
  kill(): void;
  /** Stops forwarding a stream (its bytes are still read and dropped by the spawner). */
  discard(stream: 1 | 2): void;
}

/** A process of the table, started with options or attached to (agent frames 'E' and 'A'). */
export interface Attached extends Spawned {
  /** Stops receiving its events; the process goes on (frame 'U'). */
  detach(): void;
}

/** What a start with options asks for (frame 'E'). */
export interface StartOptions {
  argv: string[];
  /** A user of the spawner's /etc/passwd to run as (its groups, HOME, SHELL); absent: the spawner's own. */
  user?: string;
  /** Absent: the user's home. */
  cwd?: string;
  /** Over HOME, USER, LOGNAME, SHELL and a default PATH. */
  env?: Record<string, string>;
  /** A stdin pipe kept open for `input` and `closeStdin` (else /dev/null). */
  stdin?: boolean;
  /** A terminal of this size instead of pipes: its output arrives as stdout. */
  pty?: { cols: number; rows: number };
  /** Kept with the process and returned by `list` (only labelled processes are listed). */
  label?: Buffer;
}

/** Where a start with options failed, and why (an errno number). */
export class StartError extends Error {
  constructor(readonly errno: number, readonly stage: 'setup' | 'user' | 'cwd' | 'exec') {
    super(`${stage === 'setup' ? 'starting the process' : stage === 'user' ? 'switching user' : stage === 'cwd' ? 'entering the working directory' : 'exec'} failed: ${errnoName(errno)}`);
  }
}

/** The channel to the spawner closed (its process ended, or the machine's connection broke) with work pending. */
export class ChannelClosedError extends Error {}

/** A request ('I', 'C', 'G', 'W') the spawner refused: its errno number. */
export class SpawnerRequestError extends Error {
  constructor(readonly errno: number) { super(`the spawner refused: ${errnoName(errno)}`); }
}

const ERRNO_NAMES = new Map<number, string>(Object.entries(constants.errno).map(([name, n]) => [n, name]));
export function errnoName(n: number): string { return ERRNO_NAMES.get(n) ?? `errno ${n}`; }

interface Pending extends SpawnHandlers {
  started(pid: number): void;
  resolve(exit: Exit): void;
  reject(err: Error): void;
}

interface Request { resolve(payload: Buffer): void; reject(err: Error): void }

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
  private readonly requests = new Map<number, Request>();
  private nextId = 1;
  private buffered: Buffer = Buffer.alloc(0);

  constructor(private readonly open: OpenChannel = localSpawner) {}

  private ensure(): SpawnerChannel {
    if (this.child) return this.child;
    const child: SpawnerChannel = this.open((c) => this.onData(c), (why) => {
      if (this.child === child) this.child = null;
      this.buffered = Buffer.alloc(0);
      for (const p of [...this.pending.values(), ...this.requests.values()]) p.reject(new ChannelClosedError(why));
      this.pending.clear();
      this.requests.clear();
    });
    this.child = child;
    return child;
  }

  /** Drops the channel (pending work fails); the next start opens a new one. */
  close(): void {
    this.child?.close();
  }

  start(argv: string[], stdin: string | Buffer | undefined, handlers: SpawnHandlers): Spawned {
    const input = Buffer.isBuffer(stdin) ? stdin : Buffer.from(stdin ?? '');
    const len = Buffer.alloc(4);
    len.writeUInt32LE(input.length);
    return this.begin('S', Buffer.concat([strings(argv), len, input]), handlers);
  }

  /** Starts a process with options (frame 'E'); `pid` rejects with a StartError when it could not. */
  startWith(opts: StartOptions, handlers: SpawnHandlers): Attached {
    const head = Buffer.alloc(8);
    head.writeUInt32LE((opts.stdin ? 1 : 0) | (opts.pty ? 2 : 0), 0);
    head.writeUInt16LE(opts.pty?.cols ?? 0, 4);
    head.writeUInt16LE(opts.pty?.rows ?? 0, 6);
    const env = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
    const label = opts.label ?? Buffer.alloc(0);
    const payload = Buffer.concat([head, cstr(opts.user ?? ''), cstr(opts.cwd ?? ''), counted(env), counted(opts.argv), u32(label.length), label]);
    return this.begin('E', payload, handlers);
  }

  /** Receives the events of a running process from now on (frame 'A'); `pid` rejects when there is none. */
  attach(pid: number, handlers: SpawnHandlers): Attached {
    return this.begin('A', u32(pid), handlers);
  }

  /** Writes to a process's stdin pipe or terminal; resolves once the bytes are in it. */
  async input(pid: number, data: Buffer): Promise<void> { await this.request('I', Buffer.concat([u32(pid), data])); }
  async closeStdin(pid: number): Promise<void> { await this.request('C', u32(pid)); }
  /** Signals the process (its whole group, in the guest agent). */
  async signal(pid: number, signal: number): Promise<void> { await this.request('G', Buffer.concat([u32(pid), u32(signal)])); }
  async resize(pid: number, cols: number, rows: number): Promise<void> {
    const size = Buffer.alloc(4);
    size.writeUInt16LE(cols, 0);
    size.writeUInt16LE(rows, 2);
    await this.request('W', Buffer.concat([u32(pid), size]));
  }

  /** The running processes started with a label, and their labels. */
  async list(): Promise<{ pid: number; label: Buffer }[]> {
    const t = await this.request('L', Buffer.alloc(0));
    const out: { pid: number; label: Buffer }[] = [];
    for (let off = 0; off + 8 <= t.length;) {
      const pid = t.readUInt32LE(off);
      const len = t.readUInt32LE(off + 4);
      out.push({ pid, label: Buffer.from(t.subarray(off + 8, off + 8 + len)) });
      off += 8 + len;
    }
    return out;
  }

  private begin(type: 'S' | 'E' | 'A', payload: Buffer, handlers: SpawnHandlers): Attached {
    const child = this.ensure();
    const id = this.nextId++ >>> 0;
    let started: (pid: number) => void = () => undefined;
    let failed: (e: Error) => void = () => undefined;
    const pid = new Promise<number>((resolve, reject) => { started = resolve; failed = reject; });
    // Callers that never ask for the pid (or the exit, having seen the pid fail) leave no unhandled rejection.
    pid.catch(() => undefined);
    const exited = new Promise<Exit>((resolve, reject) => this.pending.set(id, {
      ...handlers, started, resolve, reject: (e) => { failed(e); reject(e); },
    }));
    exited.catch(() => undefined);
    child.ref(true);
    child.write(frame(id, type, payload));
    const live = () => this.pending.has(id);
    return {
      exited,
      pid,
      kill: () => { if (live()) child.write(frame(id, 'K')); },
      discard: (stream) => { if (live()) child.write(frame(id, 'D', Buffer.from(String(stream)))); },
      detach: () => {
        const p = this.pending.get(id);
        if (!p) return;
        child.write(frame(id, 'U'));
        this.pending.delete(id);
        p.resolve({ code: null, signal: null, detached: true });
        this.unrefIfIdle();
      },
    };
  }

  private request(type: 'I' | 'C' | 'G' | 'W' | 'L', payload: Buffer): Promise<Buffer> {
    const child = this.ensure();
    const id = this.nextId++ >>> 0;
    const reply = new Promise<Buffer>((resolve, reject) => this.requests.set(id, { resolve, reject }));
    child.ref(true);
    child.write(frame(id, type, payload));
    return reply;
  }

  private unrefIfIdle(): void {
    if (this.pending.size === 0 && this.requests.size === 0 && this.child) this.child.ref(false);
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
      const r = this.requests.get(id);
      if (r && (type === 'R' || type === 'T')) {
        this.requests.delete(id);
        const errno = type === 'R' ? payload.readInt32LE(0) : 0;
        if (errno) r.reject(new SpawnerRequestError(errno)); else r.resolve(Buffer.from(payload));
        continue;
      }
      const p = this.pending.get(id);
      if (!p) continue;
      if (type === 'P') p.started(payload.readUInt32LE(0));
      else if (type === '1') p.onStdout(payload);
      else if (type === '2') p.onStderr(payload);
      else if (type === 'X') { this.pending.delete(id); p.resolve(decodeStatus(payload.readInt32LE(0))); }
      else if (type === 'F') { this.pending.delete(id); p.reject(failure(payload)); }
    }
    this.unrefIfIdle();
    this.buffered = this.buffered.subarray(off);
  }
}

const STAGES = ['setup', 'user', 'cwd', 'exec'] as const;

function failure(payload: Buffer): Error {
  const errno = payload.readUInt32LE(0);
  if (payload.length < 8) return new Error(`spawn failed: errno ${errno}`);
  return new StartError(errno, STAGES[payload.readUInt32LE(4)] ?? 'setup');
}

const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(n >>> 0); return b; };
const cstr = (s: string) => Buffer.from(`${s}\0`);
/** NUL-terminated strings ended by an empty one ('S'). */
const strings = (list: readonly string[]) => Buffer.from(list.map((a) => `${a}\0`).join('') + '\0');
/** A count, then NUL-terminated strings ('E'). */
const counted = (list: readonly string[]) => Buffer.concat([u32(list.length), ...list.map(cstr)]);

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

import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { USERNS_SPEC } from '../../util/idmap.js';
import { SBX } from '../../util/native.js';
import { spawner, type SpawnHandlers, type Spawned } from '../../util/spawner.js';

/**
 * Sandboxes made ahead of their queries (native/warm.c). Each member is an `sbx warm` pair
 * started through the spawner: namespaces, id maps, loopback, /proc, /dev and /tmp made, the
 * seccomp filter compiled, waiting on this pool's Unix socket for one job. `take()` hands out a
 * ready member once (it is never given a second job, so nothing passes between queries or
 * tenants); the pool starts another in the background once that query ended. A member that dies while it
 * waits is dropped and replaced.
 *
 * Size: as many members as queries took in the last second (at least `min`, at most `max`;
 * two at least by default, so that the second query of a burst after a lull, which comes before
 * a member made for it could be ready, starts warm too),
 * at most four being made at once (a query that finds none ready starts cold, which costs more
 * CPU than making a member: at concurrency 4 two at once left a fifth of the queries cold);
 * every few seconds, ready members beyond that size are let go (the oldest first).
 * Making a member fail three times in a row rests the pool for a while; queries then start
 * the ordinary way (cold), as they do whenever no member is ready.
 */
export interface WarmPoolOptions {
  /** A directory of the server's (`$SHELLBASE_HOME/warm`): the socket and the members' staging mount point. */
  dir: string;
  /** Open files per sandbox process. */
  nofile: number;
  min?: number;
  max?: number;
  onError?: (message: string) => void;
}

/** What a taken member reports about its start. */
export interface WarmLaunch {
  spawned: Spawned;
  /**
   * Resolves true once the member took the job and was about to start the command, false when
   * it ended before (its set-up failed or it was killed): the command then never ran.
   */
  started: Promise<boolean>;
}

interface Member {
  id: number;
  spawned: Spawned;
  socket: net.Socket | null;
  sink: SpawnHandlers | null;
  /** Output of the member before it is taken (set-up errors): kept for the log. */
  early: string;
  done: boolean;
}

const REST_MS = 30_000;
const WINDOW_MS = 1_000;
const TRIM_MS = 5_000;
const FIRST_MS = 5_000;
const MAKING_AT_ONCE = 4;

export class WarmPool {
  private readonly server = net.createServer((c) => this.onConnection(c));
  private readonly members = new Map<number, Member>();
  private readonly ready: Member[] = [];
  private readonly takes: number[] = [];
  private nextId = 1;
  private making = 0;
  private failures = 0;
  private restingUntil = 0;
  private closed = false;
  private trimmer: NodeJS.Timeout | null = null;
  private firstReady: (() => void) | null = null;
  readonly socketPath: string;
  private readonly baseDir: string;
  private readonly min: number;
  private readonly max: number;

  constructor(private readonly opts: WarmPoolOptions) {
    this.socketPath = path.join(opts.dir, 'warm.sock');
    this.baseDir = path.join(opts.dir, 'base');
    this.min = opts.min ?? 2;
    this.max = opts.max ?? 8;
  }

  async start(): Promise<void> {
    // Searchable (the inner, the sandboxes' root, mounts on `base`), not listable, like the home.
    mkdirSync(this.baseDir, { recursive: true, mode: 0o711 });
    chmodSync(this.opts.dir, 0o711);
    chmodSync(this.baseDir, 0o711);
    rmSync(this.socketPath, { force: true }); // a crashed server's
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.socketPath, () => { this.server.off('error', reject); chmodSync(this.socketPath, 0o600); resolve(); });
    });
    this.server.unref();
    this.trimmer = setInterval(() => this.trim(), TRIM_MS);
    this.trimmer.unref();
    this.fill();
    // Returns with the first member ready (or after its failures, or a few seconds): the first
    // queries need not start cold.
    await new Promise<void>((resolve) => {
      this.firstReady = resolve;
      setTimeout(resolve, FIRST_MS).unref();
    });
    this.firstReady = null;
  }

  private trim(): void {
    const extra = this.ready.length - this.target();
    for (const m of this.ready.splice(0, Math.max(0, extra))) m.spawned.kill();
  }

  /**
   * Makes members up to the target size. A taken member is replaced once its query ended (the
   * runtime calls this then), so that making it does not compete with that query for the CPU.
   */
  refill(): void {
    setImmediate(() => this.fill());
  }

  /** A ready member with `job` handed to it, or null (none ready: start the sandbox cold). */
  take(job: Buffer, handlers: SpawnHandlers): WarmLaunch | null {
    const now = performance.now();
    this.takes.push(now);
    let m: Member | undefined;
    while ((m = this.ready.shift()) && (m.done || !m.socket || m.socket.destroyed));
    if (!m) { this.fill(); return null; }
    const socket = m.socket!;
    m.early = '';
    // Output before the member's "s" can only be its own set-up error: held until then.
    const held: [1 | 2, Buffer][] = [];
    let acked = false;
    m.sink = {
      onStdout: (c) => { if (acked) handlers.onStdout(c); else held.push([1, c]); },
      onStderr: (c) => { if (acked) handlers.onStderr(c); else held.push([2, c]); },
    };
    const started = new Promise<boolean>((resolve) => {
      socket.on('data', () => {
        if (acked) return;
        acked = true;
        for (const [n, c] of held) (n === 1 ? handlers.onStdout : handlers.onStderr)(c);
        held.length = 0;
        resolve(true);
      });
      socket.once('close', () => {
        if (!acked && held.length) this.opts.onError?.(`a warm sandbox failed its job: ${held.map(([, c]) => c.toString()).join('').trim().slice(0, 500)}`);
        resolve(acked);
      });
    });
    const len = Buffer.alloc(4);
    len.writeUInt32LE(job.length);
    socket.write(Buffer.concat([len, job]));
    return { spawned: m.spawned, started };
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.trimmer) clearInterval(this.trimmer);
    for (const m of this.members.values()) m.spawned.kill();
    await Promise.all([...this.members.values()].map((m) => m.spawned.exited.catch(() => undefined)));
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    rmSync(this.socketPath, { force: true });
  }

  private target(): number {
    const now = performance.now();
    while (this.takes.length && this.takes[0] < now - WINDOW_MS) this.takes.shift();
    return Math.min(this.max, Math.max(this.min, this.takes.length));
  }

  private fill(): void {
    if (this.closed || performance.now() < this.restingUntil) return;
    const want = this.target();
    while (this.making < MAKING_AT_ONCE && this.ready.length + this.making < want) this.make();
  }

  private make(): void {
    const id = this.nextId++;
    this.making++;
    const m: Member = { id, spawned: null as unknown as Spawned, socket: null, sink: null, early: '', done: false };
    m.spawned = spawner.start([SBX, 'warm', '--connect', this.socketPath, '--id', String(id), '--userns', USERNS_SPEC,
      '--nofile', String(this.opts.nofile), '--base', this.baseDir], undefined, {
      onStdout: (c) => { if (m.sink) m.sink.onStdout(c); else if (m.early.length < 4096) m.early += c.toString(); },
      onStderr: (c) => { if (m.sink) m.sink.onStderr(c); else if (m.early.length < 4096) m.early += c.toString(); },
    });
    this.members.set(id, m);
    const ended = () => {
      m.done = true;
      this.members.delete(id);
      const at = this.ready.indexOf(m);
      if (at >= 0) this.ready.splice(at, 1);
      if (!m.socket) { this.making--; this.failed(m); }
      this.fill();
    };
    m.spawned.exited.then(ended, ended);
  }

  private failed(m: Member): void {
    if (this.closed) return;
    this.opts.onError?.(`a warm sandbox ended before it was ready: ${m.early.trim().slice(0, 500) || 'no message'}`);
    if (++this.failures >= 3) {
      this.firstReady?.();
      this.restingUntil = performance.now() + REST_MS;
      this.failures = 0;
      setTimeout(() => this.fill(), REST_MS).unref();
    }
  }

  private onConnection(c: net.Socket): void {
    let line = '';
    const onData = (d: Buffer) => {
      line += d.toString();
      const nl = line.indexOf('\n');
      if (nl < 0) { if (line.length > 32) c.destroy(); return; }
      c.off('data', onData);
      const m = this.members.get(Number(line.slice(0, nl)));
      if (!m || m.socket || m.done) { c.destroy(); return; }
      m.socket = c;
      this.making--;
      this.failures = 0;
      c.once('close', () => { if (!m.sink) m.spawned.kill(); }); // gone before its job: let the member go
      this.ready.push(m);
      this.firstReady?.();
      this.fill();
    };
    c.on('data', onData);
    c.on('error', () => undefined);
  }
}

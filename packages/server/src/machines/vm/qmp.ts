import { connect, type Socket } from 'node:net';

/** A QMP error reply, or the connection failing. */
export class QmpError extends Error {
  constructor(message: string, readonly qmpClass?: string) { super(message); }
}

interface Waiting { resolve(v: unknown): void; reject(e: Error): void }
/** An event's name, data and QEMU's time of it (ms since the epoch). */
export type QmpListener = (name: string, data: unknown, atMs: number) => void;

/**
 * A client of QEMU's machine protocol (JSON lines over a Unix socket): one
 * command at a time in flight is not required; replies are matched by id.
 * Events go to the functions given to `listen`.
 */
export class Qmp {
  private readonly waiting = new Map<number, Waiting>();
  private nextId = 1;
  private buffered = '';
  private closed: Error | null = null;
  private readonly listeners = new Set<QmpListener>();

  private constructor(private readonly socket: Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => this.onData(chunk));
    socket.on('error', (e) => this.fail(e));
    socket.on('close', () => this.fail(new QmpError('QEMU closed its QMP socket')));
  }

  /** Connects (retrying while QEMU creates the socket), reads the greeting, negotiates capabilities. */
  static async connect(socketPath: string, timeoutMs: number): Promise<Qmp> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        const socket = await new Promise<Socket>((resolve, reject) => {
          const s = connect(socketPath);
          s.once('connect', () => { s.removeAllListeners('error'); resolve(s); });
          s.once('error', reject);
        });
        const greeted = new Promise<void>((resolve, reject) => {
          let text = '';
          const onData = (c: Buffer) => {
            text += c.toString();
            if (text.includes('\n')) { socket.off('data', onData); socket.unshift(Buffer.from(text.slice(text.indexOf('\n') + 1))); resolve(); }
          };
          socket.on('data', onData);
          socket.on('error', reject);
          socket.once('close', () => reject(new QmpError('QEMU closed QMP before its greeting')));
        });
        await greeted.catch((e) => { socket.destroy(); throw e; });
        socket.removeAllListeners('error');
        socket.removeAllListeners('close');
        const qmp = new Qmp(socket);
        await qmp.execute('qmp_capabilities');
        return qmp;
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if ((code !== 'ENOENT' && code !== 'ECONNREFUSED') || Date.now() > deadline) throw e;
        await new Promise((r) => setTimeout(r, 10));
      }
    }
  }

  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T> {
    if (this.closed) return Promise.reject(this.closed);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.socket.write(`${JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}), id })}\n`);
    });
  }

  /** A monitor command QMP lacks (e.g. `hostfwd_add`); its output is the command's error text, if any. */
  async human(commandLine: string): Promise<string> {
    return this.execute<string>('human-monitor-command', { 'command-line': commandLine });
  }

  /** Calls `fn` with every event from now until the returned function is called. */
  listen(fn: QmpListener): () => void {
    this.listeners.add(fn);
    return () => { this.listeners.delete(fn); };
  }

  close(): void {
    this.socket.destroy();
  }

  private onData(chunk: string): void {
    this.buffered += chunk;
    let nl: number;
    while ((nl = this.buffered.indexOf('\n')) >= 0) {
      const line = this.buffered.slice(0, nl).trim();
      this.buffered = this.buffered.slice(nl + 1);
      if (!line) continue;
      let msg: { id?: number; return?: unknown; error?: { class: string; desc: string }; event?: string; data?: unknown; timestamp?: { seconds: number; microseconds: number } };
      try { msg = JSON.parse(line); } catch { continue; }
      if (msg.event) {
        const at = msg.timestamp ? msg.timestamp.seconds * 1000 + msg.timestamp.microseconds / 1000 : Date.now();
        for (const l of this.listeners) {
          try { l(msg.event, msg.data, at); } catch { /* a listener's fault is its own: the replies go on */ }
        }
        continue;
      }
      const w = typeof msg.id === 'number' ? this.waiting.get(msg.id) : undefined;
      if (!w) continue;
      this.waiting.delete(msg.id!);
      if (msg.error) w.reject(new QmpError(msg.error.desc, msg.error.class));
      else w.resolve(msg.return);
    }
  }

  private fail(e: Error): void {
    if (this.closed) return;
    this.closed = e instanceof QmpError ? e : new QmpError(e.message);
    for (const w of this.waiting.values()) w.reject(this.closed);
    this.waiting.clear();
  }
}

import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { PTY_PROTOCOL, isErrorCode, type ErrorBody, type PtyMessage } from '@shellbase/protocol';
import { ConnectionError, errorFromBody, type ShellbaseError } from './core/errors.js';
import { upgradeRequest } from './upgrade.js';

/** The largest message `write` sends. */
const WRITE_CHUNK = 64 << 10;

/** How a PTY's shell ended. */
export interface PtyExit { exitCode: number | null; signal?: string }

/**
 * An interactive terminal in a machine (`GET /v1/machines/{id}/pty`, a WebSocket): root's login
 * shell. `write` types into it, `onData` sees what it shows, `resize` changes its size, `close`
 * hangs up. `exited` resolves when the shell ends, and rejects with the server's typed error when
 * the machine went away under it (or with a ConnectionError when the connection broke).
 */
export class MachinePty {
  readonly exited: Promise<PtyExit>;
  private readonly listeners = new Set<(data: Buffer) => void>();
  private buffered: Buffer = Buffer.alloc(0);
  private parts: Buffer[] = [];
  private settle!: { resolve(e: PtyExit): void; reject(e: Error): void };
  private ended = false;

  constructor(private readonly socket: Duplex, head: Buffer) {
    this.exited = new Promise((resolve, reject) => { this.settle = { resolve, reject }; });
    this.exited.catch(() => undefined);
    socket.on('data', (c: Buffer) => this.onBytes(c));
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.finish(new ConnectionError({ code: 'unavailable', message: 'the PTY\'s connection closed before its shell ended' }, 0)));
    if (head.length) this.onBytes(head);
  }

  /** Calls `f` with each piece of output; returns how to stop. */
  onData(f: (data: Buffer) => void): () => void {
    this.listeners.add(f);
    return () => this.listeners.delete(f);
  }

  /** Types `data` (sent in messages of at most 64 KiB: the server takes up to 1 MiB in one). */
  write(data: string | Uint8Array): void {
    const bytes = Buffer.from(data);
    for (let at = 0; at < bytes.length; at += WRITE_CHUNK) this.frame(2, bytes.subarray(at, at + WRITE_CHUNK));
  }

  resize(cols: number, rows: number): void { this.frame(1, Buffer.from(JSON.stringify({ type: 'resize', cols, rows } satisfies PtyMessage))); }

  /** Hangs up (the shell gets SIGHUP); `exited` settles when the server has closed. */
  close(): void {
    const code = Buffer.alloc(2);
    code.writeUInt16BE(1000);
    this.frame(8, code);
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }

  /** A masked frame, as a client must send (RFC 6455 §5.3). */
  private frame(op: number, payload: Buffer): void {
    if (this.socket.destroyed || this.ended) return;
    const n = payload.length;
    const head = Buffer.alloc(n < 126 ? 2 : n < 65536 ? 4 : 10);
    head[0] = 0x80 | op;
    if (n < 126) head[1] = 0x80 | n;
    else if (n < 65536) { head[1] = 0x80 | 126; head.writeUInt16BE(n, 2); } else { head[1] = 0x80 | 127; head.writeBigUInt64BE(BigInt(n), 2); }
    const mask = randomBytes(4);
    const body = Buffer.from(payload);
    for (let i = 0; i < body.length; i++) body[i] ^= mask[i & 3];
    this.socket.write(Buffer.concat([head, mask, body]));
  }

  private onBytes(chunk: Buffer): void {
    this.buffered = this.buffered.length ? Buffer.concat([this.buffered, chunk]) : chunk;
    for (;;) {
      const b = this.buffered;
      if (b.length < 2) return;
      let len = b[1] & 0x7f;
      let at = 2;
      if (len === 126) { if (b.length < 4) return; len = b.readUInt16BE(2); at = 4; } else if (len === 127) { if (b.length < 10) return; len = Number(b.readBigUInt64BE(2)); at = 10; }
      if (b.length < at + len) return;
      const fin = (b[0] & 0x80) !== 0;
      const op = b[0] & 0x0f;
      const payload = b.subarray(at, at + len);
      this.buffered = b.subarray(at + len);
      if (op === 9) this.frame(10, Buffer.from(payload));
      else if (op === 8) { this.frame(8, Buffer.from(payload.subarray(0, 2))); this.ended = true; this.socket.end(); }
      else if (op <= 2) {
        this.parts.push(Buffer.from(payload));
        if (op !== 0) this.parts.unshift(Buffer.from([op]));
        if (fin) this.onMessage();
      }
    }
  }

  private onMessage(): void {
    const [kind, ...rest] = this.parts;
    this.parts = [];
    const data = Buffer.concat(rest);
    if (kind[0] === 2) { for (const f of this.listeners) f(data); return; }
    let msg: Partial<PtyMessage | { type: 'error'; error: ErrorBody }>;
    try { msg = JSON.parse(data.toString()) as typeof msg; } catch { msg = {}; }
    if (msg.type === 'exit') this.finish({ exitCode: msg.exitCode ?? null, ...(msg.signal ? { signal: msg.signal } : {}) });
    else if (msg.type === 'error' && msg.error) this.finish(errorFromBody(isErrorCode(msg.error.code) ? msg.error : { code: 'internal', message: String(msg.error.message) }, 0));
    // Anything else (a message type this client does not know) is left alone.
  }

  private finish(result: PtyExit | ShellbaseError): void {
    if (result instanceof Error) this.settle.reject(result); else this.settle.resolve(result);
  }
}

/** Opens the PTY at `path` with the API key in `Authorization`; the API's typed error when it refuses. */
export async function openPty(baseUrl: string, path: string, apiKey: string | undefined): Promise<MachinePty> {
  const { socket, head } = await upgradeRequest(baseUrl, path, apiKey, {
    upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': randomBytes(16).toString('base64'), 'sec-websocket-protocol': PTY_PROTOCOL,
  });
  return new MachinePty(socket, head);
}

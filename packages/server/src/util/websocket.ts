import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';

/** RFC 6455's constant that the handshake's accept value is hashed with. */
const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
const OP = { continuation: 0, text: 1, binary: 2, close: 8, ping: 9, pong: 10 } as const;
/** Close codes used here (RFC 6455 §7.4.1). */
export const CLOSE = { normal: 1000, goingAway: 1001, protocol: 1002, badData: 1007, policy: 1008, tooBig: 1009, error: 1011 } as const;

export interface WebSocketOptions {
  /** A message (all its fragments) larger than this closes the connection (1009). */
  maxMessageBytes: number;
  /** Output queued for the client beyond this closes the connection (1008): a reader too slow for its writer. */
  maxBufferedBytes: number;
  /** A ping this often; a client silent for three of them is gone (its socket is destroyed). */
  pingMs?: number;
}

/**
 * Whether an endpoint may send `code` in a close frame (RFC 6455 §7.4: the codes it defines but
 * 1004-1006 and 1015, IANA's 1012-1014, and 3000-4999 for libraries and applications).
 */
function sendable(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/** Whether a request asks for a WebSocket (RFC 6455 §4.2.1: GET, Upgrade: websocket, version 13, a key). */
export function isWebSocketRequest(req: IncomingMessage): boolean {
  return req.method === 'GET' && (req.headers.upgrade ?? '').toLowerCase() === 'websocket'
    && req.headers['sec-websocket-version'] === '13' && typeof req.headers['sec-websocket-key'] === 'string';
}

/** The subprotocols a request offers (`Sec-WebSocket-Protocol`, comma-separated, possibly over several headers). */
export function offeredProtocols(req: IncomingMessage): string[] {
  const raw = req.headers['sec-websocket-protocol'];
  return (Array.isArray(raw) ? raw.join(',') : raw ?? '').split(',').map((s) => s.trim()).filter(Boolean);
}

/**
 * The server side of one WebSocket connection (RFC 6455, no extensions): the handshake's answer,
 * then frames both ways. Client frames must be masked; fragments are joined into messages; text
 * must be UTF-8; pings are answered; a close is answered and ends the socket. What it sends is
 * never masked and never fragmented.
 */
export class WebSocketConnection {
  onMessage: (data: Buffer, binary: boolean) => void = () => undefined;
  /** Once, when the connection is gone (after a close handshake, or a broken socket). */
  onClose: (code: number, reason: string) => void = () => undefined;
  private buffered: Buffer = Buffer.alloc(0);
  private fragments: Buffer[] = [];
  private fragmentsBytes = 0;
  private fragmentOp = 0;
  private closing = false;
  private closed = false;
  private lastHeard = Date.now();
  private readonly pinger: NodeJS.Timeout | null;
  private static readonly utf8 = new TextDecoder('utf-8', { fatal: true });

  constructor(private readonly socket: Duplex, private readonly opts: WebSocketOptions, head: Buffer) {
    socket.on('data', (c: Buffer) => this.onData(c));
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.gone(CLOSE.goingAway, 'the connection closed'));
    const every = opts.pingMs ?? 30_000;
    this.pinger = setInterval(() => {
      if (Date.now() - this.lastHeard > 3 * every) socket.destroy();
      else this.frame(OP.ping, Buffer.alloc(0));
    }, every);
    this.pinger.unref();
    // After the caller has set onMessage and onClose (it does so before it awaits anything): bytes that
    // came with the handshake are frames like any others, and no later 'data' event can overtake them.
    if (head.length) queueMicrotask(() => this.onData(head));
  }

  get open(): boolean { return !this.closing && !this.closed; }

  send(data: Buffer | string): void {
    if (!this.open) return;
    if (this.socket.writableLength > this.opts.maxBufferedBytes) {
      this.close(CLOSE.policy, 'the client reads too slowly');
      return;
    }
    this.frame(typeof data === 'string' ? OP.text : OP.binary, typeof data === 'string' ? Buffer.from(data) : data);
  }

  /** Starts the close handshake; the socket ends when the client answers (or after a second). */
  close(code: number = CLOSE.normal, reason = ''): void {
    if (!this.open) return;
    this.closing = true;
    const r = Buffer.from(reason.slice(0, 120));
    const payload = Buffer.alloc(2 + r.length);
    payload.writeUInt16BE(code, 0);
    r.copy(payload, 2);
    this.frame(OP.close, payload);
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }

  private frame(op: number, payload: Buffer): void {
    if (this.socket.destroyed) return;
    const n = payload.length;
    const head = Buffer.alloc(n < 126 ? 2 : n < 65536 ? 4 : 10);
    head[0] = 0x80 | op;
    if (n < 126) head[1] = n;
    else if (n < 65536) { head[1] = 126; head.writeUInt16BE(n, 2); } else { head[1] = 127; head.writeBigUInt64BE(BigInt(n), 2); }
    this.socket.write(n ? Buffer.concat([head, payload]) : head);
  }

  private fail(code: number, reason: string): void {
    this.close(code, reason);
    this.buffered = Buffer.alloc(0);
    this.socket.pause();
  }

  private onData(chunk: Buffer): void {
    if (this.closed) return;
    this.lastHeard = Date.now();
    this.buffered = this.buffered.length ? Buffer.concat([this.buffered, chunk]) : chunk;
    for (;;) {
      const b = this.buffered;
      if (b.length < 2) return;
      const fin = (b[0] & 0x80) !== 0;
      const op = b[0] & 0x0f;
      if (b[0] & 0x70) return this.fail(CLOSE.protocol, 'no extension was agreed');
      if ((b[1] & 0x80) === 0) return this.fail(CLOSE.protocol, 'client frames must be masked');
      let len = b[1] & 0x7f;
      let at = 2;
      if (len === 126) { if (b.length < 4) return; len = b.readUInt16BE(2); at = 4; } else if (len === 127) {
        if (b.length < 10) return;
        const big = b.readBigUInt64BE(2);
        if (big > BigInt(this.opts.maxMessageBytes)) return this.fail(CLOSE.tooBig, 'message too large');
        len = Number(big);
        at = 10;
      }
      if (op >= 8 && (!fin || len > 125)) return this.fail(CLOSE.protocol, 'bad control frame');
      if (op < 8 && this.fragmentsBytes + len > this.opts.maxMessageBytes) return this.fail(CLOSE.tooBig, 'message too large');
      if (b.length < at + 4 + len) return;
      const mask = b.subarray(at, at + 4);
      const payload = Buffer.from(b.subarray(at + 4, at + 4 + len));
      for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
      this.buffered = b.subarray(at + 4 + len);
      if (!this.onFrame(fin, op, payload)) return;
    }
  }

  /** One frame; false when the connection is failing (stop reading). */
  private onFrame(fin: boolean, op: number, payload: Buffer): boolean {
    if (op === OP.ping) { if (this.open) this.frame(OP.pong, payload); return true; }
    if (op === OP.pong) return true;
    if (op === OP.close) {
      const code = payload.length >= 2 ? payload.readUInt16BE(0) : CLOSE.normal;
      if (payload.length === 1 || (payload.length >= 2 && !sendable(code))) { this.fail(CLOSE.protocol, 'a close frame with a code no endpoint may send'); return false; }
      try { WebSocketConnection.utf8.decode(payload.subarray(2)); } catch { this.fail(CLOSE.badData, 'a close reason must be UTF-8'); return false; }
      if (this.open) { this.closing = true; this.frame(OP.close, payload.subarray(0, 2)); }
      this.gone(code, payload.subarray(2).toString());
      this.socket.end();
      setTimeout(() => this.socket.destroy(), 1000).unref();
      return false;
    }
    if (op !== OP.continuation && op !== OP.text && op !== OP.binary) { this.fail(CLOSE.protocol, `unknown opcode ${op}`); return false; }
    if ((op === OP.continuation) !== (this.fragments.length > 0)) { this.fail(CLOSE.protocol, 'bad fragment'); return false; }
    if (op !== OP.continuation) this.fragmentOp = op;
    this.fragments.push(payload);
    this.fragmentsBytes += payload.length;
    if (!fin) return true;
    const data = this.fragments.length === 1 ? this.fragments[0] : Buffer.concat(this.fragments);
    const binary = this.fragmentOp === OP.binary;
    this.fragments = [];
    this.fragmentsBytes = 0;
    if (!binary) {
      try { WebSocketConnection.utf8.decode(data); } catch { this.fail(CLOSE.badData, 'text frames must be UTF-8'); return false; }
    }
    if (this.open) {
      // A handler's bug ends this connection, not the process.
      try { this.onMessage(data, binary); } catch { this.fail(CLOSE.error, 'internal error'); return false; }
    }
    return true;
  }

  private gone(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.pinger) clearInterval(this.pinger);
    this.onClose(code, reason);
  }
}

/**
 * Answers a WebSocket request (see isWebSocketRequest) with `101 Switching Protocols`, choosing
 * `protocol` (which the client must have offered), and returns the connection.
 */
export function acceptWebSocket(req: IncomingMessage, socket: Duplex, head: Buffer, protocol: string, opts: WebSocketOptions): WebSocketConnection {
  const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}${GUID}`).digest('base64');
  socket.write(['HTTP/1.1 101 Switching Protocols', 'Upgrade: websocket', 'Connection: Upgrade',
    `Sec-WebSocket-Accept: ${accept}`, `Sec-WebSocket-Protocol: ${protocol}`, '', ''].join('\r\n'));
  if ('setNoDelay' in socket && typeof socket.setNoDelay === 'function') socket.setNoDelay(true);
  return new WebSocketConnection(socket, opts, head);
}

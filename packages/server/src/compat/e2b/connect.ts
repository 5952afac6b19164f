import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ErrorCode } from '@shellbase/protocol';
import { ShellbaseError } from '../../errors.js';

/**
 * The Connect protocol as envd speaks it, JSON only: unary calls are a POST of
 * `application/json` answered with JSON (an error: a non-200 status and
 * `{code, message}`); server streams are a POST of one enveloped message with
 * `application/connect+json`, answered with 200 and a stream of envelopes
 * (a flags byte, a big-endian u32 length, the JSON), the last one flagged
 * end-of-stream (0x02) carrying `{}` or `{error}`. Client streams send their
 * messages as envelopes of the request body.
 */

export const CONNECT_CODES = ['canceled', 'unknown', 'invalid_argument', 'deadline_exceeded', 'not_found', 'already_exists',
  'permission_denied', 'resource_exhausted', 'failed_precondition', 'aborted', 'out_of_range', 'unimplemented', 'internal',
  'unavailable', 'data_loss', 'unauthenticated'] as const;
export type ConnectCode = (typeof CONNECT_CODES)[number];

const HTTP_OF: Record<ConnectCode, number> = {
  canceled: 499, unknown: 500, invalid_argument: 400, deadline_exceeded: 504, not_found: 404, already_exists: 409,
  permission_denied: 403, resource_exhausted: 429, failed_precondition: 400, aborted: 409, out_of_range: 400,
  unimplemented: 501, internal: 500, unavailable: 503, data_loss: 500, unauthenticated: 401,
};

const FROM_SHELLBASE: Record<ErrorCode, ConnectCode> = {
  invalid_argument: 'invalid_argument', unauthorized: 'unauthenticated', forbidden: 'permission_denied', not_found: 'not_found',
  already_exists: 'already_exists', conflict: 'aborted', payload_too_large: 'resource_exhausted', limit_exceeded: 'resource_exhausted',
  failed_precondition: 'failed_precondition', unavailable: 'unavailable', internal: 'internal',
};

/** An error as a Connect client sees it (the SDK maps the code to its error classes). */
export class ConnectError extends Error {
  constructor(readonly code: ConnectCode, message: string) { super(message); }
}

export function toConnectError(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  if (e instanceof ShellbaseError) return new ConnectError(FROM_SHELLBASE[e.code], e.hint ? `${e.message} (${e.hint})` : e.message);
  return new ConnectError('internal', 'internal error');
}

export const MAX_MESSAGE_BYTES = 16 << 20;

/** The request body, whole (at most `limit` bytes, else resource_exhausted). */
export async function readBody(req: IncomingMessage, limit = MAX_MESSAGE_BYTES): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > limit) throw new ConnectError('resource_exhausted', `message larger than ${limit} bytes`);
    chunks.push(c);
  }
  return Buffer.concat(chunks);
}

function parseJson(bytes: Buffer): Record<string, unknown> {
  let v: unknown;
  try { v = JSON.parse(bytes.length ? bytes.toString('utf8') : '{}'); } catch { throw new ConnectError('invalid_argument', 'the message is not JSON'); }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new ConnectError('invalid_argument', 'the message is not a JSON object');
  return v as Record<string, unknown>;
}

/** The one message of a unary or server-streaming call. */
export async function readMessage(req: IncomingMessage, streaming: boolean): Promise<Record<string, unknown>> {
  const body = await readBody(req);
  if (!streaming) return parseJson(body);
  if (body.length < 5) throw new ConnectError('invalid_argument', 'missing enveloped message');
  if (body[0] & 1) throw new ConnectError('internal', 'compressed messages are not supported');
  const len = body.readUInt32BE(1);
  if (body.length < 5 + len) throw new ConnectError('invalid_argument', 'truncated enveloped message');
  return parseJson(body.subarray(5, 5 + len));
}

/** The messages of a client stream, as they arrive (the end-of-stream envelope ends it). */
export async function* readMessages(req: IncomingMessage): AsyncGenerator<Record<string, unknown>> {
  let buf: Buffer = Buffer.alloc(0);
  for await (const c of req as AsyncIterable<Buffer>) {
    buf = buf.length ? Buffer.concat([buf, c]) : c;
    while (buf.length >= 5) {
      const len = buf.readUInt32BE(1);
      if (len > MAX_MESSAGE_BYTES) throw new ConnectError('resource_exhausted', `message larger than ${MAX_MESSAGE_BYTES} bytes`);
      if (buf.length < 5 + len) break;
      const flags = buf[0];
      const msg = buf.subarray(5, 5 + len);
      buf = buf.subarray(5 + len);
      if (flags & 2) return;
      yield parseJson(msg);
    }
  }
}

/** `Connect-Timeout-Ms`, if the client set one. */
export function timeoutOf(req: IncomingMessage): number | undefined {
  const v = req.headers['connect-timeout-ms'];
  const n = typeof v === 'string' && /^\d{1,10}$/.test(v) ? Number(v) : undefined;
  return n && n > 0 ? n : undefined;
}

export function sendUnary(res: ServerResponse, message: object): void {
  const body = JSON.stringify(message);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}

export function sendUnaryError(res: ServerResponse, e: unknown): void {
  const err = toConnectError(e);
  const body = JSON.stringify({ code: err.code, message: err.message });
  if (res.headersSent) { res.destroy(); return; }
  res.writeHead(HTTP_OF[err.code], { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}

function envelope(flags: number, message: object): Buffer {
  const json = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** The response of a streaming call: 200 at once, then messages, then the end of the stream. */
export class ServerStream {
  private ended = false;

  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'application/connect+json' });
    res.flushHeaders();
  }

  get open(): boolean { return !this.ended && !this.res.destroyed; }

  /** `fn` runs if the client goes away before the stream ended. */
  onClose(fn: () => void): void {
    this.res.once('close', () => { if (!this.ended) fn(); });
  }

  send(message: object): void {
    if (this.open) this.res.write(envelope(0, message));
  }

  /**
   * Breaks the stream off without its end, as a connection to a sandbox that went away breaks: the
   * SDK then asks the sandbox's `/health`, and one that is gone (killed, ended or paused) is its
   * "killed or reached its end of life" error.
   */
  drop(): void {
    if (!this.open) return;
    this.ended = true;
    this.res.destroy();
  }

  end(error?: unknown): void {
    if (!this.open) return;
    this.ended = true;
    const e = error === undefined ? undefined : toConnectError(error);
    this.res.end(envelope(2, e ? { error: { code: e.code, message: e.message } } : {}));
  }
}

/** Bytes fields travel as base64 (standard or URL-safe, padded or not). */
export function bytesField(v: unknown, name: string): Buffer {
  if (v === undefined || v === null) return Buffer.alloc(0);
  if (typeof v !== 'string' || !/^[A-Za-z0-9+/_-]*={0,2}$/.test(v)) throw new ConnectError('invalid_argument', `${name} is not base64`);
  return Buffer.from(v.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
}

import type { IncomingMessage, ServerResponse } from 'node:http';
import { ShellbaseError, invalid } from '../../errors.js';

/**
 * The control plane's HTTP forms: JSON bodies, and errors as `{code, message}` where `code` is
 * the HTTP status (the SDK maps 401, 404, 429, 503 and the rest to its error classes).
 */
export function sendJson(res: ServerResponse, status: number, body?: unknown, headers: Record<string, string> = {}): void {
  if (body === undefined) { res.writeHead(status, headers).end(); return; }
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers }).end(text);
}

export function sendError(res: ServerResponse, e: unknown): void {
  const err = e instanceof ShellbaseError ? e : new ShellbaseError('internal', 'internal error', { cause: e });
  if (res.headersSent) { res.destroy(); return; }
  sendJson(res, err.status, { code: err.status, message: err.hint ? `${err.message} (${err.hint})` : err.message });
}

/** A request's `Authorization: Bearer` token, if it has one. */
export function bearerOf(req: IncomingMessage): string | undefined {
  return /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
}

/** The API key of a control-plane request (`X-API-KEY`, as E2B's SDK sends it, or a Bearer token) as shellbase's `Authorization`. */
export function apiAuthorization(req: IncomingMessage): string | undefined {
  const key = req.headers['x-api-key'];
  const token = typeof key === 'string' && key ? key : bearerOf(req);
  return token ? `Bearer ${token}` : undefined;
}

const MAX_BODY = 1 << 20;

/** A JSON object body (empty: `{}`), at most 1 MiB. */
export async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_BODY) throw new ShellbaseError('payload_too_large', 'request body too large', { hint: 'send at most 1 MiB' });
    chunks.push(c);
  }
  const text = Buffer.concat(chunks).toString('utf8').trim();
  if (!text) return {};
  let v: unknown;
  try { v = JSON.parse(text); } catch { throw invalid('the body is not JSON', 'send a JSON object'); }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid('the body is not a JSON object', 'send a JSON object');
  return v as Record<string, unknown>;
}

/** A map of strings to strings (absent or null: empty). */
export function stringMap(v: unknown, name: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw invalid(`${name} must be an object of strings`);
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== 'string') throw invalid(`${name}.${k} must be a string`);
    out[k] = val;
  }
  return out;
}

export function optionalBoolean(v: unknown, name: string): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw invalid(`${name} must be true or false`);
  return v;
}

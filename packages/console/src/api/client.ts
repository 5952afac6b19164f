import type { ErrorBody } from '@shellbase/protocol';

/** An error the API answered with (`{"error":{code,message,details?,hint?}}`), or a failure to reach it. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly hint?: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

const KEY = 'shellbase.apiKey';

/** The API key of this tab: sessionStorage, so it goes when the tab closes. */
export const session = {
  get key(): string | null { return sessionStorage.getItem(KEY); },
  set(key: string): void { sessionStorage.setItem(KEY, key); },
  clear(): void { sessionStorage.removeItem(KEY); },
};

/** What the console calls when a key is refused mid-session (it signs out). */
let onUnauthorized: () => void = () => {};
export function setUnauthorizedHandler(f: () => void): void { onUnauthorized = f; }

export interface RequestOptions {
  method?: string;
  query?: Record<string, string | number | boolean | undefined>;
  json?: unknown;
  body?: BodyInit;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** A key to use instead of the session's (sign-in checks one before keeping it). */
  key?: string;
}

/** `/v1/...` with path segments encoded one by one ("a/b c" stays two segments). */
export function url(path: string, query?: RequestOptions['query']): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) q.set(k, String(v));
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** One segment of a path, percent-encoded. */
export const seg = (s: string): string => encodeURIComponent(s);
/** A file path inside a context ("/a/b c") as URL segments ("a/b%20c"). */
export const filePath = (p: string): string => p.split('/').filter(Boolean).map(seg).join('/');

async function errorOf(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => '');
  try {
    const body = JSON.parse(text) as { error?: ErrorBody };
    if (body.error) return new ApiError(res.status, body.error.code, body.error.message, body.error.hint, body.error.details);
  } catch { /* not JSON */ }
  return new ApiError(res.status, 'http_' + res.status, text.trim() || `${res.status} ${res.statusText}`);
}

/** A request; a non-2xx answer throws ApiError (and a 401 signs the tab out). */
export async function request(path: string, opts: RequestOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { ...opts.headers };
  const key = opts.key ?? session.key;
  if (key) headers.authorization = `Bearer ${key}`;
  let body = opts.body;
  if (opts.json !== undefined) { body = JSON.stringify(opts.json); headers['content-type'] = 'application/json'; }
  let res: Response;
  try {
    res = await fetch(url(path, opts.query), { method: opts.method ?? 'GET', headers, body, signal: opts.signal });
  } catch (err) {
    if (opts.signal?.aborted) throw err;
    throw new ApiError(0, 'unreachable', `could not reach the server (${(err as Error).message})`, 'check that `shellbase serve` is running');
  }
  if (!res.ok) {
    const e = await errorOf(res);
    if (res.status === 401 && opts.key === undefined) onUnauthorized();
    throw e;
  }
  return res;
}

/** A request answered with JSON (204 gives undefined). */
export async function api<T>(path: string, opts: RequestOptions = {}): Promise<T> {
  const res = await request(path, { ...opts, headers: { accept: 'application/json', ...opts.headers } });
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

/** Reads an NDJSON response line by line as it arrives. */
export async function* ndjson<T>(res: Response): AsyncGenerator<T> {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buf += value;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) yield JSON.parse(line) as T;
    }
    if (done) break;
  }
  if (buf.trim()) yield JSON.parse(buf) as T;
}

/** base64url of a string's UTF-8 bytes (a key as a WebSocket subprotocol token). */
function base64url(s: string): string {
  let bin = '';
  for (const b of new TextEncoder().encode(s)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * A WebSocket to a PTY route of the API. A browser cannot set `Authorization` on a WebSocket, so
 * the tab's key is offered as the subprotocol `shellbase-key.BASE64URL(KEY)` beside
 * `shellbase-pty` (the server answers with `shellbase-pty` only); never in the URL.
 */
export function ptySocket(path: string, query: RequestOptions['query']): WebSocket {
  const u = new URL(url(path, query), location.href);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  const protocols = ['shellbase-pty', ...(session.key ? [`shellbase-key.${base64url(session.key)}`] : [])];
  const ws = new WebSocket(u.href, protocols);
  ws.binaryType = 'arraybuffer';
  return ws;
}

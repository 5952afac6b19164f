import type { Socket } from 'node:net';

export interface RequestOptions {
  body?: unknown;
  /** A body sent as bytes (application/octet-stream), whole or streamed. */
  raw?: string | Uint8Array | AsyncIterable<Uint8Array>;
  headers?: Record<string, string>;
  accept?: string;
  signal?: AbortSignal;
  /** Query parameters; an array repeats its parameter. */
  query?: Record<string, string | number | string[] | undefined>;
}

/**
 * What the SDK's handles (contexts, machines, images) need of a client: requests to its server.
 * `Shellbase` is the one implementation; the handles know it only by this.
 */
export interface Transport {
  readonly url: string;
  request(method: string, path: string, options?: RequestOptions): Promise<Response>;
  json<T>(method: string, path: string, options?: RequestOptions): Promise<T>;
  /** A raw connection after an HTTP upgrade at `path` (TCP tunnels to services). */
  tunnel(path: string): Promise<Socket>;
}

/** Each client's key, for the SDK's own modules that open connections themselves (pty.ts); not part of the class's surface. */
const KEYS = new WeakMap<Transport, string | undefined>();
export const apiKeyOf = (t: Transport): string | undefined => KEYS.get(t);
export const keepApiKey = (t: Transport, key: string | undefined): void => { KEYS.set(t, key); };

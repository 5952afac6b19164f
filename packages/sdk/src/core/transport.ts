export interface RequestOptions {
  body?: unknown;
  /**
   * A body sent as bytes (application/octet-stream): whole (a string, bytes, a Blob) or streamed
   * (an async iterable, which Node's fetch sends and browsers' do not).
   */
  raw?: string | Uint8Array | Blob | AsyncIterable<Uint8Array>;
  headers?: Record<string, string>;
  accept?: string;
  signal?: AbortSignal;
  /** Query parameters; an array repeats its parameter. */
  query?: Record<string, string | number | string[] | undefined>;
}

/**
 * What the SDK's handles (contexts, machines, images) need of a client: requests to its server.
 * `Shellbase` is the one implementation (Node's adds raw connections); the handles know it only by this.
 */
export interface Transport {
  readonly url: string;
  /** Sends a request and throws the typed error for any non-2xx answer. */
  request(method: string, path: string, options?: RequestOptions): Promise<Response>;
  /** The same, answered with JSON (undefined for 204). */
  json<T>(method: string, path: string, options?: RequestOptions): Promise<T>;
}

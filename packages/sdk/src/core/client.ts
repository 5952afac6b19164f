import { isErrorCode, type ApiKey, type BackupResult, type BuildEvent, type BuildResult, type Context, type ErrorBody, type GcResult, type NetworkPolicy, type PushResult, type RegistryCredentials, type Tenant, type UsageItem } from '@shellbase/protocol';
import { ContextHandle } from './context.js';
import { MachineHandle, machinesApi } from './machine.js';
import { build, buildStream, imagesApi, type BuildOptions, type TarBody } from './images.js';
import { eventsApi, webhooksApi } from './events.js';
import { ConnectionError, errorFromBody } from './errors.js';
import { ndjson } from './ndjson.js';
import type { RequestOptions, Transport } from './transport.js';

/** A backup's progress line: its phase, how far it is, and the bytes it stored so far. */
export interface BackupProgress {
  type: 'progress';
  phase: 'metadata' | 'layers' | 'machines' | 'retention';
  done: number;
  total: number;
  bytes: number;
}

export interface ClientOptions {
  /** The server's URL (a page the server itself serves passes `location.origin`). */
  url: string;
  /** The API key, or a function asked at each request (a browser tab's key comes and goes as it signs in and out). */
  apiKey?: string | (() => string | undefined);
}

/**
 * The shellbase client without Node: `new Shellbase({ url, apiKey }).context('demo').exec('ls')`
 * in a browser as in Node. `@shellbase/sdk`'s Shellbase extends it with defaults from the
 * environment, TCP tunnels, machine terminals and builds from a directory.
 */
export class Shellbase implements Transport {
  readonly url: string;
  private readonly apiKey: ClientOptions['apiKey'];

  constructor(options: ClientOptions) {
    this.url = options.url.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
  }

  /** A handle on a context; nothing is sent until it is used (exec creates it if missing). */
  context(name: string): ContextHandle {
    return new ContextHandle(this, name);
  }

  readonly contexts = {
    list: async (): Promise<Context[]> => (await this.json<{ contexts: Context[] }>('GET', '/v1/contexts')).contexts,
    get: (name: string): Promise<Context> => this.json('GET', `/v1/contexts/${encodeURIComponent(name)}`),
    /** `image`: `debian` (the default) or a pulled image's reference. */
    create: (body: { name: string; image?: string; from?: { context: string; version?: string }; empty?: boolean }): Promise<Context> =>
      this.json('POST', '/v1/contexts', { body }),
    delete: async (name: string): Promise<void> => { await this.request('DELETE', `/v1/contexts/${encodeURIComponent(name)}`); },
    /**
     * The context as an archive (docs/formats.md), streamed: its head, a `version`, or with
     * `history` every version the head reaches. An archive cut short fails its import.
     */
    export: async (name: string, options: { version?: string; history?: boolean; signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> => {
      const res = await this.request('GET', `/v1/contexts/${encodeURIComponent(name)}/export`, {
        query: { version: options.version, history: options.history ? 'true' : undefined }, signal: options.signal,
      });
      if (!res.body) throw new Error('the export answered without a body');
      return res.body;
    },
    /**
     * The context as an OCI image layout (docs/formats.md, "OCI export"), a tar streamed: its head or
     * a `version`, named `tag` (default `latest`) in the layout's index. `tar -x` it into a directory
     * for `skopeo copy oci:DIR:TAG …`.
     */
    exportOci: async (name: string, options: { version?: string; tag?: string; signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> => {
      const res = await this.request('GET', `/v1/contexts/${encodeURIComponent(name)}/export/oci`, {
        query: { version: options.version, tag: options.tag }, signal: options.signal,
      });
      if (!res.body) throw new Error('the export answered without a body');
      return res.body;
    },
    /** Pushes the context (its head or a `version`) to a registry as an OCI image, `ref` being `registry/repository:tag`. */
    push: (name: string, ref: string, options: { version?: string; credentials?: RegistryCredentials; insecure?: boolean; signal?: AbortSignal } = {}): Promise<PushResult> =>
      this.json('POST', `/v1/contexts/${encodeURIComponent(name)}/push`, {
        body: { ref, version: options.version, credentials: options.credentials, insecure: options.insecure }, signal: options.signal,
      }),
    /** A new context from an archive `export` wrote, with its version ids; `as` names it (default: the archive's name). */
    import: (archive: TarBody, options: { as?: string; signal?: AbortSignal } = {}): Promise<Context> =>
      this.json('POST', '/v1/contexts/import', { raw: archive, query: { as: options.as }, signal: options.signal }),
  };

  /** Machines (microVMs): `await sb.machines.create()` then `machine.exec(...)`, `machine.fork(2)`. */
  readonly machines = machinesApi(this, (id) => new MachineHandle(this, id));

  /** OCI images: `await sb.images.pull('docker.io/library/python:3.12-slim')`, then contexts of them. */
  readonly images = imagesApi(this);

  /** What happens in the tenant: `await sb.events.stream({ kinds: ['version.committed'] }, (e) => ...)`. */
  readonly events = eventsApi(this);

  /** URLs the tenant's events are POSTed to, signed: `await sb.webhooks.create({ url, events: [...] })`. */
  readonly webhooks = webhooksApi(this);

  /**
   * Builds a Dockerfile into the context `tag` (steps the cache has are not run
   * again); `onEvent` sees steps and RUN output as they come.
   */
  build(options: BuildOptions & { onEvent?: (e: BuildEvent) => void }): Promise<BuildResult> {
    return build(this, options);
  }

  /** The same build as a stream of events, ending with `result`. */
  buildStream(options: BuildOptions): AsyncGenerator<BuildEvent> {
    return buildStream(this, options);
  }

  /** Tenants and their API keys (admin key only). */
  readonly tenants = {
    create: (name: string, quotas?: Record<string, number>, network?: NetworkPolicy): Promise<{ tenant: Tenant; apiKey: string }> =>
      this.json('POST', '/v1/tenants', { body: { name, ...(quotas ? { quotas } : {}), ...(network ? { network } : {}) } }),
    /** Changes the tenant's quotas (replaced whole) and egress policy (null: the server's default again). */
    update: (name: string, change: { quotas?: Record<string, number>; network?: NetworkPolicy | null }): Promise<Tenant> =>
      this.json('PUT', `/v1/tenants/${encodeURIComponent(name)}`, { body: change }),
    /** Sets the tenant's egress policy (null: the server's default again). */
    setNetwork: (name: string, network: NetworkPolicy | null): Promise<Tenant> =>
      this.json('PUT', `/v1/tenants/${encodeURIComponent(name)}`, { body: { network } }),
    list: async (): Promise<Tenant[]> => (await this.json<{ tenants: Tenant[] }>('GET', '/v1/tenants')).tenants,
    /** Another key for the tenant (rotate: create, switch clients, revoke the old one). */
    createKey: (name: string): Promise<{ key: ApiKey; apiKey: string }> =>
      this.json('POST', `/v1/tenants/${encodeURIComponent(name)}/keys`),
    listKeys: async (name: string): Promise<ApiKey[]> =>
      (await this.json<{ keys: ApiKey[] }>('GET', `/v1/tenants/${encodeURIComponent(name)}/keys`)).keys,
    revokeKey: async (name: string, keyId: string): Promise<void> => {
      await this.request('DELETE', `/v1/tenants/${encodeURIComponent(name)}/keys/${encodeURIComponent(keyId)}`);
    },
    /** Revokes every key of the tenant; its data stays. */
    revoke: async (name: string): Promise<void> => { await this.request('DELETE', `/v1/tenants/${encodeURIComponent(name)}`); },
  };

  /** What the caller's queries cost over a time range, and what its versions store. */
  usage(query: { from?: string; to?: string; groupBy?: 'context' | 'kind' | 'day' | 'hour'; tenant?: string } = {}): Promise<{ items: UsageItem[]; total: UsageItem }> {
    return this.json('GET', '/v1/usage', { query });
  }

  /** Runs garbage collection now (admin key); it also runs in the background. */
  gc(): Promise<GcResult> {
    return this.json('POST', '/v1/gc');
  }

  /**
   * Backs the whole server up (admin key) into `to`, a directory on the server's host or
   * `s3://BUCKET/PREFIX`, while it keeps serving; only what the target lacks is copied.
   * `shellbase restore` brings a backup back into an empty home.
   */
  async backup(options: { to: string; keep?: number; s3Endpoint?: string; onProgress?: (p: BackupProgress) => void; signal?: AbortSignal }): Promise<BackupResult> {
    const { onProgress, signal, ...body } = options;
    const res = await this.request('POST', '/v1/backups', { body, accept: 'application/x-ndjson', signal });
    for await (const e of ndjson<{ type: string } & Record<string, unknown>>(res)) {
      if (e.type === 'progress') onProgress?.(e as unknown as BackupProgress);
      else if (e.type === 'backup') { const { type: _t, ...result } = e; return result as unknown as BackupResult; }
    }
    throw new Error('the backup ended without its result');
  }

  /** Sends a request and throws the typed error for any non-2xx answer. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { accept: options.accept ?? 'application/json', ...options.headers };
    const key = typeof this.apiKey === 'function' ? this.apiKey() : this.apiKey;
    if (key) headers.authorization = `Bearer ${key}`;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    if (options.raw !== undefined) headers['content-type'] = 'application/octet-stream';
    const qs = Object.entries(options.query ?? {}).filter(([, v]) => v !== undefined)
      .flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => `${encodeURIComponent(k)}=${encodeURIComponent(String(x))}`)).join('&');
    let res: Response;
    try {
      const raw = options.raw;
      const streamed = raw !== undefined && typeof raw !== 'string' && !(raw instanceof Uint8Array) && !(raw instanceof Blob);
      res = await fetch(`${this.url}${path}${qs ? `?${qs}` : ''}`, {
        method, headers, signal: options.signal,
        body: (raw as BodyInit | undefined) ?? (options.body === undefined ? undefined : JSON.stringify(options.body)),
        ...(streamed ? { duplex: 'half' } : {}),
      } as RequestInit);
    } catch (e) {
      if (options.signal?.aborted) throw e;
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      throw this.unreachable(cause?.code ?? cause?.message ?? (e as Error).message, e);
    }
    if (res.ok) return res;
    const text = await res.text();
    let body: ErrorBody = { code: 'internal', message: `HTTP ${res.status}: ${text.slice(0, 500)}` };
    try {
      const parsed = JSON.parse(text) as { error?: ErrorBody };
      if (parsed.error && isErrorCode(parsed.error.code)) body = parsed.error;
    } catch { /* not JSON: keep the raw text */ }
    throw errorFromBody(body, res.status);
  }

  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, options);
    return (res.status === 204 ? undefined : await res.json()) as T;
  }

  /** The error for a request that never reached the server (`why`: refused, unresolvable, TLS, blocked), with the URL. */
  protected unreachable(why: string, err: unknown): ConnectionError {
    return new ConnectionError({
      code: 'unavailable', message: `cannot reach the shellbase server at ${this.url}: ${why}`,
      hint: 'check that the server is running (`shellbase serve`) and that the url names it', details: { url: this.url },
    }, 0, { cause: err });
  }
}

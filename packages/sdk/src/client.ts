import { existsSync, readFileSync } from 'node:fs';
import { isErrorCode, type ApiKey, type BuildEvent, type BuildResult, type Context, type ErrorBody, type GcResult, type NetworkPolicy, type Tenant, type UsageItem } from '@shellbase/protocol';
import { ContextHandle } from './context.js';
import { machinesApi } from './machine.js';
import { build, buildStream, imagesApi, type BuildOptions } from './images.js';
import { ConnectionError, errorFromBody } from './errors.js';
import { openTunnel } from './tunnel.js';
import type { Socket } from 'node:net';
import { keepApiKey, type RequestOptions, type Transport } from './transport.js';

export type { RequestOptions } from './transport.js';

const DEFAULT_URL = 'http://127.0.0.1:7070';

export interface ShellbaseOptions {
  /** Server URL; defaults to SHELLBASE_URL or http://127.0.0.1:7070. */
  url?: string;
  /** API key; defaults to SHELLBASE_API_KEY, then to the admin key file of a server on this host. */
  apiKey?: string;
}

function defaultKey(): string | undefined {
  if (process.env.SHELLBASE_API_KEY) return process.env.SHELLBASE_API_KEY;
  const file = `${process.env.SHELLBASE_HOME || '/var/lib/shellbase'}/admin.key`;
  try { return existsSync(file) ? readFileSync(file, 'utf8').trim() : undefined; } catch { return undefined; }
}

/** The shellbase client: `new Shellbase().context('demo').exec('ls')`. */
export class Shellbase implements Transport {
  readonly url: string;
  private readonly apiKey?: string;

  /** Where `url` came from, for messages when the server cannot be reached. */
  readonly urlSource: 'the url option' | 'SHELLBASE_URL' | 'the default';

  constructor(options: ShellbaseOptions = {}) {
    const fromEnv = process.env.SHELLBASE_URL || undefined;
    this.urlSource = options.url !== undefined ? 'the url option' : fromEnv !== undefined ? 'SHELLBASE_URL' : 'the default';
    this.url = (options.url ?? fromEnv ?? DEFAULT_URL).replace(/\/+$/, '');
    this.apiKey = options.apiKey ?? defaultKey();
    keepApiKey(this, this.apiKey);
  }

  /** A handle on a context; nothing is sent until it is used (exec creates it if missing). */
  context(name: string): ContextHandle {
    return new ContextHandle(this, name);
  }

  readonly contexts = {
    list: async (): Promise<Context[]> => (await this.json<{ contexts: Context[] }>('GET', '/v1/contexts')).contexts,
    get: (name: string): Promise<Context> => this.json('GET', `/v1/contexts/${encodeURIComponent(name)}`),
    /** `image`: `debian` (the default) or a pulled image's reference. */
    create: (body: { name: string; image?: string; from?: { context: string; version?: string } }): Promise<Context> =>
      this.json('POST', '/v1/contexts', { body }),
    delete: async (name: string): Promise<void> => { await this.request('DELETE', `/v1/contexts/${encodeURIComponent(name)}`); },
  };

  /** Machines (microVMs): `await sb.machines.create()` then `machine.exec(...)`, `machine.fork(2)`. */
  readonly machines = machinesApi(this);

  /** OCI images: `await sb.images.pull('docker.io/library/python:3.12-slim')`, then contexts of them. */
  readonly images = imagesApi(this);

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

  /** Sends a request and throws the typed error for any non-2xx answer. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { accept: options.accept ?? 'application/json', ...options.headers };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    if (options.raw !== undefined) headers['content-type'] = 'application/octet-stream';
    const qs = Object.entries(options.query ?? {}).filter(([, v]) => v !== undefined)
      .flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => `${encodeURIComponent(k)}=${encodeURIComponent(String(x))}`)).join('&');
    let res: Response;
    try {
      const streamed = options.raw !== undefined && typeof options.raw !== 'string' && !(options.raw instanceof Uint8Array);
      res = await fetch(`${this.url}${path}${qs ? `?${qs}` : ''}`, {
        method, headers, signal: options.signal,
        body: (options.raw as BodyInit | undefined) ?? (options.body === undefined ? undefined : JSON.stringify(options.body)),
        ...(streamed ? { duplex: 'half' } : {}),
      } as RequestInit);
    } catch (e) {
      if (options.signal?.aborted) throw e;
      throw connectionError(this.url, this.urlSource, e);
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

  /** A TCP tunnel the API opens at `path` (a service's `/connect`). */
  tunnel(path: string): Promise<Socket> {
    return openTunnel(this.url, path, this.apiKey);
  }

  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, options);
    return (res.status === 204 ? undefined : await res.json()) as T;
  }
}

/** Why a request never reached the server (refused, unresolvable, TLS), said with the URL and where it came from. */
function connectionError(url: string, source: Shellbase['urlSource'], err: unknown): ConnectionError {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const why = cause?.code ?? cause?.message ?? (err as Error).message;
  const hint = source === 'SHELLBASE_URL'
    ? 'check that SHELLBASE_URL names a running shellbase server (`shellbase serve` or `npm start` starts one)'
    : source === 'the default'
      ? `start a server on this host (\`npm start\` in the checkout, or \`shellbase serve\`), or set SHELLBASE_URL to a server's URL; `
        + 'agent hosts (MCP) must pass SHELLBASE_URL and SHELLBASE_API_KEY in the server entry\'s env'
      : 'check the url option';
  return new ConnectionError({
    code: 'unavailable', message: `cannot reach the shellbase server at ${url} (from ${source}): ${why}`, hint, details: { url, source },
  }, 0, { cause: err });
}

import type { Socket } from 'node:net';
import type { Context, ContextDefaults, ContextNetwork, CreateServiceRequest, NetworkConnection, NetworkPolicy, ServiceShare, DiffResult, DirEntry, ExecEvent, ExecRequest, ExecResult, FileStat, Service, Version } from '@shellbase/protocol';
import type { Transport } from './transport.js';
import { LONG_EXEC_MS, collectExec, ndjson } from './ndjson.js';
import { listenTunnel, type LocalTunnel } from './tunnel.js';

export type ExecOptions = Omit<ExecRequest, 'command' | 'argv'> & { signal?: AbortSignal };

/** A context, optionally pinned to a version (`at`), as the SDK sees it. */
export class ContextHandle {
  constructor(private readonly sb: Transport, readonly name: string, readonly pinnedVersion?: string) {}

  private path(suffix = ''): string {
    return `/v1/contexts/${encodeURIComponent(this.name)}${suffix}`;
  }

  /** `/files/a/b` with each segment encoded (dot segments too, which URL parsers would resolve). */
  private filePath(kind: 'files' | 'stat', p: string): string {
    const segments = p.split('/').filter((s, i) => i > 0 || s !== '').map((s) =>
      s === '..' ? '%2e%2e' : s === '.' ? '%2e' : encodeURIComponent(s));
    return this.path(`/${kind}/${segments.join('/')}`);
  }

  /** Files read and written straight from the layer store, with no sandbox. */
  readonly files = {
    read: async (p: string, options: { version?: string } = {}): Promise<Buffer> => {
      const res = await this.sb.request('GET', this.filePath('files', p), { query: { version: options.version ?? this.pinnedVersion }, accept: '*/*' });
      return Buffer.from(await res.arrayBuffer());
    },
    /** The response, for streaming a large file (`res.body`). */
    open: (p: string, options: { version?: string; range?: [number, number] } = {}): Promise<Response> =>
      this.sb.request('GET', this.filePath('files', p), {
        query: { version: options.version ?? this.pinnedVersion }, accept: '*/*',
        headers: options.range ? { range: `bytes=${options.range[0]}-${options.range[1]}` } : undefined,
      }),
    list: async (p: string, options: { version?: string } = {}): Promise<DirEntry[]> =>
      (await this.sb.json<{ entries: DirEntry[] }>('GET', this.filePath('files', p), { query: { version: options.version ?? this.pinnedVersion } })).entries,
    stat: (p: string, options: { version?: string } = {}): Promise<FileStat> =>
      this.sb.json('GET', this.filePath('stat', p), { query: { version: options.version ?? this.pinnedVersion } }),
    write: (p: string, data: string | Uint8Array, options: { mode?: number } = {}): Promise<{ version: string }> =>
      this.sb.json('PUT', this.filePath('files', p), {
        raw: data, query: { mode: options.mode === undefined ? undefined : options.mode.toString(8) },
      }),
    /** Unpacks a tar archive below directory `p`, as one version. */
    writeTar: (p: string, tar: Uint8Array): Promise<{ version: string }> =>
      this.sb.json('PUT', this.filePath('files', p), { raw: tar, query: { format: 'tar' } }),
    remove: (p: string, options: { recursive?: boolean } = {}): Promise<{ version: string }> =>
      this.sb.json('DELETE', this.filePath('files', p), { query: { recursive: options.recursive ? 'true' : undefined } }),
  };

  /** What changed between two versions (default: the head against its parent). */
  diff(options: { from?: string; to?: string; path?: string } = {}): Promise<DiffResult> {
    return this.sb.json('GET', this.path('/diff'), { query: options });
  }

  /** Merges another context (usually a fork of this one) into this one. */
  merge(from: string): Promise<{ version: string }> {
    return this.sb.json('POST', this.path('/merge'), { body: { from } });
  }

  /** Moves the head to `version`; later versions stay in the history. */
  reset(version: string): Promise<Context> {
    return this.sb.json('POST', this.path('/reset'), { body: { version } });
  }

  private body(command: string | string[], options: ExecOptions): ExecRequest {
    const { signal: _s, ...rest } = options;
    const req: ExecRequest = { ...rest, ...(Array.isArray(command) ? { argv: command } : { command }) };
    if (this.pinnedVersion && req.version === undefined) req.version = this.pinnedVersion;
    return req;
  }

  /** Runs a command (a string for `bash -c`, or an argv array) and waits for its result. */
  exec(command: string | string[], options: ExecOptions = {}): Promise<ExecResult> {
    if ((options.timeoutMs ?? 0) > LONG_EXEC_MS && options.onConflict !== 'retry') return collectExec(this.execStream(command, options));
    return this.sb.json('POST', this.path('/exec'), { body: this.body(command, options), signal: options.signal });
  }

  /** Runs a command and yields its output as it happens, then one `exit` event. */
  async *execStream(command: string | string[], options: ExecOptions = {}): AsyncGenerator<ExecEvent> {
    const res = await this.sb.request('POST', this.path('/exec'), {
      body: this.body(command, options), accept: 'application/x-ndjson', signal: options.signal,
    });
    yield* ndjson<ExecEvent>(res);
  }

  /** Long-running processes over this context, on a gateway URL; they run only while used. */
  readonly services = {
    /** Defines a service (nothing starts until the first request to its URL). */
    create: (req: CreateServiceRequest): Promise<Service> => this.sb.json('POST', this.path('/services'), { body: req }),
    list: async (): Promise<Service[]> => (await this.sb.json<{ services: Service[] }>('GET', this.path('/services'))).services,
    get: (name: string): Promise<Service> => this.sb.json('GET', this.path(`/services/${encodeURIComponent(name)}`)),
    /** Who else reaches it at `{name}.{context}.internal:{port}`: "tenant", a list of contexts, or null (this context only). */
    share: (name: string, share: ServiceShare | null): Promise<Service> =>
      this.sb.json('PUT', this.path(`/services/${encodeURIComponent(name)}/share`), { body: { share } }),
    /** Puts it to sleep now; its writes commit to the context. */
    stop: (name: string): Promise<Service> => this.sb.json('POST', this.path(`/services/${encodeURIComponent(name)}/stop`)),
    remove: async (name: string): Promise<void> => { await this.sb.request('DELETE', this.path(`/services/${encodeURIComponent(name)}`)); },
    /** The last lines of its stdout and stderr, across runs. */
    logs: async (name: string, options: { tail?: number } = {}): Promise<string> =>
      (await this.sb.request('GET', this.path(`/services/${encodeURIComponent(name)}/logs`), { query: { tail: options.tail }, accept: 'text/plain' })).text(),
    /**
     * A local port that reaches the service's port over plain TCP (through the
     * API, with the API key; the service wakes on each connection), so a
     * database in a context answers `psql -h 127.0.0.1 -p PORT`.
     */
    connect: (name: string, options: { port?: number; host?: string; onError?: (e: unknown) => void } = {}): Promise<LocalTunnel> =>
      listenTunnel(() => this.sb.tunnel(this.path(`/services/${encodeURIComponent(name)}/connect`)), options),
    /** One TCP connection to the service as a duplex stream (resolves once its port accepted). */
    stream: (name: string): Promise<Socket> => this.sb.tunnel(this.path(`/services/${encodeURIComponent(name)}/connect`)),
  };

  /** This context's egress policy (its own, if set, and the one its sandboxes get) and its audit log. */
  readonly network = {
    get: (): Promise<ContextNetwork> => this.sb.json('GET', this.path('/network')),
    /** Sets its own policy (within the tenant's); forks inherit it. */
    set: (policy: NetworkPolicy): Promise<ContextNetwork> => this.sb.json('PUT', this.path('/network'), { body: policy }),
    /** Drops its own policy: the tenant's applies again. */
    clear: (): Promise<ContextNetwork> => this.sb.json('DELETE', this.path('/network')),
    /** The last connections its sandboxes asked for, newest first (allowed or refused, and why). */
    log: async (options: { limit?: number } = {}): Promise<NetworkConnection[]> =>
      (await this.sb.json<{ connections: NetworkConnection[] }>('GET', this.path('/network/log'), { query: { limit: options.limit } })).connections,
  };

  /** Forks this context (at its head, or at the pinned version) into a new one, in O(1). */
  async fork(newName: string, options: { version?: string } = {}): Promise<ContextHandle> {
    const version = options.version ?? this.pinnedVersion;
    await this.sb.json('POST', this.path('/fork'), { body: { name: newName, ...(version ? { version } : {}) } });
    return new ContextHandle(this.sb, newName);
  }

  /** Versions newest first; `before` pages on from the parent of a version a previous page ended with. */
  async versions(options: { limit?: number; before?: string } = {}): Promise<Version[]> {
    return (await this.sb.json<{ versions: Version[] }>('GET', this.path('/versions'), { query: { limit: options.limit, before: options.before } })).versions;
  }

  /** The same context, with reads and queries pinned to `version`. */
  at(version: string): ContextHandle {
    return new ContextHandle(this.sb, this.name, version);
  }

  info(): Promise<Context> {
    return this.sb.json('GET', this.path());
  }

  /** Replaces the context's defaults (env, cwd, user) its queries and services run with unless they say otherwise. */
  setDefaults(defaults: ContextDefaults): Promise<Context> {
    return this.sb.json('PATCH', this.path(), { body: { defaults } });
  }

  async delete(): Promise<void> {
    await this.sb.request('DELETE', this.path());
  }
}

import type { Context, ContextDefaults, ContextNetwork, CreateServiceRequest, NetworkConnection, NetworkPolicy, ServiceShare, DiffResult, DirEntry, ExecEvent, ExecRequest, ExecResult, FileStat, Service, Version } from '@shellbase/protocol';
import type { Transport } from './transport.js';
import { LONG_EXEC_MS, collectExec, ndjson } from './ndjson.js';

export type ExecOptions = Omit<ExecRequest, 'command' | 'argv'> & { signal?: AbortSignal };

/**
 * A context, optionally pinned to a version (`at`), as the SDK sees it anywhere (a browser too).
 * Node's ContextHandle (../context.ts) extends it: files read as Buffers, services reached over TCP.
 */
export class ContextHandle {
  constructor(protected readonly sb: Transport, readonly name: string, readonly pinnedVersion?: string) {}

  protected path(suffix = ''): string {
    return `/v1/contexts/${encodeURIComponent(this.name)}${suffix}`;
  }

  /** A handle of this one's own class (Node's, from Node's) on another context or version. */
  protected another(name: string, version?: string): this {
    const Handle = this.constructor as new (sb: Transport, name: string, version?: string) => this;
    return new Handle(this.sb, name, version);
  }

  /** `/files/a/b` with each segment encoded (dot segments too, which URL parsers would resolve). */
  private filePath(kind: 'files' | 'stat', p: string): string {
    const segments = p.split('/').filter((s, i) => i > 0 || s !== '').map((s) =>
      s === '..' ? '%2e%2e' : s === '.' ? '%2e' : encodeURIComponent(s));
    return this.path(`/${kind}/${segments.join('/')}`);
  }

  /** Files read and written straight from the layer store, with no sandbox. */
  readonly files = this.fileCalls();

  protected fileCalls() {
    return {
      read: async (p: string, options: { version?: string } = {}): Promise<Uint8Array> =>
        new Uint8Array(await (await this.files.open(p, options)).arrayBuffer()),
      /** The response, for streaming a large file (`res.body`); `range` asks for bytes `[first, last]` only. */
      open: (p: string, options: { version?: string; range?: [number, number] } = {}): Promise<Response> =>
        this.sb.request('GET', this.filePath('files', p), {
          query: { version: options.version ?? this.pinnedVersion }, accept: '*/*',
          headers: options.range ? { range: `bytes=${options.range[0]}-${options.range[1]}` } : undefined,
        }),
      list: async (p: string, options: { version?: string } = {}): Promise<DirEntry[]> =>
        (await this.sb.json<{ entries: DirEntry[] }>('GET', this.filePath('files', p), { query: { version: options.version ?? this.pinnedVersion } })).entries,
      stat: (p: string, options: { version?: string } = {}): Promise<FileStat> =>
        this.sb.json('GET', this.filePath('stat', p), { query: { version: options.version ?? this.pinnedVersion } }),
      write: (p: string, data: string | Uint8Array | Blob, options: { mode?: number } = {}): Promise<{ version: string }> =>
        this.sb.json('PUT', this.filePath('files', p), {
          raw: data, query: { mode: options.mode === undefined ? undefined : options.mode.toString(8) },
        }),
      /** Unpacks a tar archive below directory `p`, as one version. */
      writeTar: (p: string, tar: Uint8Array | Blob): Promise<{ version: string }> =>
        this.sb.json('PUT', this.filePath('files', p), { raw: tar, query: { format: 'tar' } }),
      remove: (p: string, options: { recursive?: boolean } = {}): Promise<{ version: string }> =>
        this.sb.json('DELETE', this.filePath('files', p), { query: { recursive: options.recursive ? 'true' : undefined } }),
    };
  }

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
  readonly services = this.serviceCalls();

  protected serviceCalls() {
    const service = (name: string, suffix = '') => this.path(`/services/${encodeURIComponent(name)}${suffix}`);
    return {
      /** Defines a service (nothing starts until the first request to its URL). */
      create: (req: CreateServiceRequest): Promise<Service> => this.sb.json('POST', this.path('/services'), { body: req }),
      list: async (): Promise<Service[]> => (await this.sb.json<{ services: Service[] }>('GET', this.path('/services'))).services,
      get: (name: string): Promise<Service> => this.sb.json('GET', service(name)),
      /** Who else reaches it at `{name}.{context}.internal:{port}`: "tenant", a list of contexts, or null (this context only). */
      share: (name: string, share: ServiceShare | null): Promise<Service> =>
        this.sb.json('PUT', service(name, '/share'), { body: { share } }),
      /** Puts it to sleep now; its writes commit to the context. */
      stop: (name: string): Promise<Service> => this.sb.json('POST', service(name, '/stop')),
      remove: async (name: string): Promise<void> => { await this.sb.request('DELETE', service(name)); },
      /** The last lines of its stdout and stderr, across runs. */
      logs: async (name: string, options: { tail?: number } = {}): Promise<string> =>
        (await this.sb.request('GET', service(name, '/logs'), { query: { tail: options.tail }, accept: 'text/plain' })).text(),
    };
  }

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
  async fork(newName: string, options: { version?: string } = {}): Promise<this> {
    const version = options.version ?? this.pinnedVersion;
    await this.sb.json('POST', this.path('/fork'), { body: { name: newName, ...(version ? { version } : {}) } });
    return this.another(newName);
  }

  /** Versions newest first; `before` pages on from the parent of a version a previous page ended with. */
  async versions(options: { limit?: number; before?: string } = {}): Promise<Version[]> {
    return (await this.sb.json<{ versions: Version[] }>('GET', this.path('/versions'), { query: { limit: options.limit, before: options.before } })).versions;
  }

  /** The same context, with reads and queries pinned to `version`. */
  at(version: string): this {
    return this.another(this.name, version);
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

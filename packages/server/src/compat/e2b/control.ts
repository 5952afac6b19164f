import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Caller } from '../../core/deps.js';
import { ShellbaseError, invalid } from '../../errors.js';
import type { Operations } from '../../ops/dispatch.js';
import { BASE_TEMPLATE, type Sandbox, type Sandboxes } from './sandboxes.js';
import { timeoutSeconds } from './record.js';
import { pageOf } from './listing.js';
import { apiAuthorization, sendError, sendJson, readJson, stringMap, optionalBoolean } from './http.js';
import { e2bNetworkView, e2bPolicy } from './network.js';
import type { PassOn } from './envd.js';

/**
 * The envd version the SDK is told: what it may use (0.5.7: default user, stdin close, octet-stream
 * uploads; 0.6.2: file metadata; 0.6.3: watch events with entry info; 0.6.4: watching network mounts).
 */
export const ENVD_VERSION = '0.6.4';
/** What create, connect and fork default to when no timeout is sent (seconds), as E2B's API does. */
const DEFAULT_TIMEOUT_S = 300;

type Handler = (caller: Caller, req: IncomingMessage, res: ServerResponse, params: string[], url: URL) => Promise<void>;

/** The control plane's paths; `claims` says whether a request is one of them. */
type RouteName = 'create' | 'list' | 'info' | 'kill' | 'timeout' | 'refresh' | 'pause' | 'connect' | 'fork' | 'snapshot' | 'snapshots' | 'deleteSnapshot' | 'metrics' | 'network';

const ROUTES: [string, RegExp, RouteName][] = [
  ['POST', /^\/(?:v2\/)?sandboxes$/, 'create'],
  ['GET', /^\/(?:v2\/)?sandboxes$/, 'list'],
  ['GET', /^\/sandboxes\/([^/]+)$/, 'info'],
  ['DELETE', /^\/sandboxes\/([^/]+)$/, 'kill'],
  ['POST', /^\/sandboxes\/([^/]+)\/timeout$/, 'timeout'],
  ['POST', /^\/sandboxes\/([^/]+)\/refreshes$/, 'refresh'],
  ['POST', /^\/sandboxes\/([^/]+)\/pause$/, 'pause'],
  ['POST', /^\/(?:v2\/sandboxes\/([^/]+)\/connect|sandboxes\/([^/]+)\/(?:connect|resume))$/, 'connect'],
  ['POST', /^\/sandboxes\/([^/]+)\/fork$/, 'fork'],
  ['POST', /^\/sandboxes\/([^/]+)\/snapshots$/, 'snapshot'],
  ['GET', /^\/snapshots$/, 'snapshots'],
  ['DELETE', /^\/templates\/([^/]+)$/, 'deleteSnapshot'],
  ['GET', /^\/sandboxes\/([^/]+)\/metrics$/, 'metrics'],
  ['PUT', /^\/sandboxes\/([^/]+)\/network$/, 'network'],
];

/** The control plane's calls about one sandbox (`/sandboxes/{id}…`, `/v2/sandboxes/{id}…`): its id is the route's parameter. */
const ABOUT_SANDBOX = /^\/(?:v2\/)?sandboxes\/[^/]+/;

export function isControlPath(path: string): boolean {
  return /^\/(v2\/)?(sandboxes|snapshots|templates)(\/|$)/.test(path);
}

/**
 * E2B's control plane (REST, `X-API-KEY`) over sandboxes: create, connect, list with paging and
 * filters, info, timeout, kill, pause, fork and snapshots. Errors are `{code, message}` with the
 * HTTP status as code, which the SDK maps to its error classes (404, 401, 429, ...).
 */
export class ControlPlane {
  private readonly routes: Record<RouteName, Handler> = {
    create: (c, req, res) => this.create(c, req, res),
    list: (c, req, res, p, url) => this.list(c, req, res, p, url),
    info: (c, req, res, p) => this.info(c, req, res, p),
    kill: (c, req, res, p) => this.kill(c, req, res, p),
    timeout: (c, req, res, p) => this.timeout(c, req, res, p),
    refresh: (c, req, res, p) => this.refresh(c, req, res, p),
    pause: (c, req, res, p) => this.pause(c, req, res, p),
    connect: (c, req, res, p) => this.connect(c, req, res, p),
    fork: (c, req, res, p) => this.fork(c, req, res, p),
    snapshot: (c, req, res, p) => this.snapshot(c, req, res, p),
    snapshots: (c, req, res, p, url) => this.snapshots(c, req, res, p, url),
    deleteSnapshot: (c, req, res, p) => this.deleteSnapshot(c, req, res, p),
    metrics: (c, req, res, p) => this.metrics(c, req, res, p),
    network: (c, req, res, p) => this.network(c, req, res, p),
  };

  constructor(private readonly ops: Operations, private readonly sandboxes: Sandboxes) {}

  /** `passOn`: in a cluster, a call about a sandbox another worker runs goes there, once the caller's key was checked here. */
  async handle(req: IncomingMessage, res: ServerResponse, passOn?: PassOn): Promise<void> {
    let caller: Caller | null = null;
    try {
      const url = new URL(req.url ?? '/', 'http://e2b');
      const route = ROUTES.find(([m, re]) => m === req.method && re.test(url.pathname));
      if (!route) throw new ShellbaseError('not_found', `no route ${req.method} ${url.pathname}`);
      caller = await this.ops.begin(apiAuthorization(req));
      const params = (route[1].exec(url.pathname) ?? []).slice(1).filter((p): p is string => p !== undefined).map(decodeURIComponent);
      if (passOn && ABOUT_SANDBOX.test(url.pathname) && (await passOn(params[0], req, res))) return;
      await this.routes[route[2]](caller, req, res, params, url);
    } catch (e) {
      sendError(res, e);
    } finally {
      const c = caller;
      if (c) res.once('close', () => c.hold.release());
    }
  }

  private async create(caller: Caller, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const b = await readJson(req);
    const template = b.templateID ?? BASE_TEMPLATE;
    if (typeof template !== 'string' || !template) throw invalid('templateID must be a string', 'name a template: base, an image, a context or a snapshot id');
    // The SDK would start the gateway (`mcp-gateway`) in the sandbox once made; shellbase has none, so nothing is made.
    if (b.mcp !== undefined && b.mcp !== null) {
      throw invalid('MCP gateways are not supported by shellbase: no MCP gateway can start in its sandboxes', 'create the sandbox without mcp and start the MCP servers you need in it with commands.run');
    }
    const mounts = volumeMounts(b.volumeMounts);
    const network = (typeof b.network === 'object' && b.network !== null ? b.network : {}) as Record<string, unknown>;
    unsupportedNetwork(network);
    const egress = e2bPolicy(b.allow_internet_access, network);
    if (b.iam !== undefined && b.iam !== null) throw invalid('workload identity (iam) is not supported by shellbase');
    const autoPause = optionalBoolean(b.autoPause, 'autoPause') ?? false;
    const autoResume = typeof b.autoResume === 'object' && b.autoResume !== null ? optionalBoolean((b.autoResume as Record<string, unknown>).enabled, 'autoResume.enabled') ?? false : false;
    const keepMemory = optionalBoolean(b.autoPauseMemory, 'autoPauseMemory') ?? true;
    if (autoPause && !keepMemory && autoResume) {
      throw invalid('autoResume cannot be combined with a pause without memory (keepMemory false)', 'resume such a sandbox with Sandbox.connect, or keep its memory');
    }
    const s = await this.sandboxes.create(caller, {
      template, timeoutS: timeoutSeconds(b.timeout, DEFAULT_TIMEOUT_S), metadata: stringMap(b.metadata, 'metadata'), envs: stringMap(b.envVars, 'envVars'),
      onTimeout: autoPause ? 'pause' : 'kill', keepMemory, autoResume, publicTraffic: optionalBoolean(network.allowPublicTraffic, 'network.allowPublicTraffic') ?? true,
      ...(egress ? { network: egress } : {}), ...(mounts.length ? { mounts } : {}),
    });
    sendJson(res, 201, this.created(s));
  }

  private created(s: Sandbox) {
    return {
      sandboxID: s.row.id, templateID: s.e2b.templateId, clientID: 'shellbase', envdVersion: ENVD_VERSION,
      envdAccessToken: s.e2b.accessToken, domain: null, ...(s.e2b.trafficToken ? { trafficAccessToken: s.e2b.trafficToken } : {}),
    };
  }

  private listed(s: Sandbox) {
    const paused = s.e2b.paused || s.row.state === 'paused' || s.row.state === 'stopped';
    return {
      sandboxID: s.row.id, templateID: s.e2b.templateId, clientID: 'shellbase', startedAt: s.e2b.startedAt, endAt: s.e2b.endAt,
      cpuCount: s.row.spec.cpus, memoryMB: s.row.spec.memoryMb, diskSizeMB: 8192, envdVersion: ENVD_VERSION, metadata: s.e2b.metadata,
      state: paused ? 'paused' : 'running',
    };
  }

  /** Newest started first (or `order=asc`), filtered before paging; `X-Next-Token` on every page but the last (compat/e2b/listing.ts). */
  private async list(caller: Caller, _req: IncomingMessage, res: ServerResponse, _p: string[], url: URL): Promise<void> {
    const q = url.searchParams;
    const states = q.getAll('state').flatMap((s) => s.split(',')).filter(Boolean);
    for (const s of states) if (s !== 'running' && s !== 'paused') throw invalid(`unknown state ${JSON.stringify(s)}`, 'use running or paused');
    const want = new Set(states.length ? states : url.pathname.startsWith('/v2/') ? ['running', 'paused'] : ['running']);
    const metadata = parseMetadataQuery(q.get('metadata'));
    const template = q.get('template');
    const after = q.get('startedAfter');
    const items = (await this.sandboxes.list(caller)).map((s) => this.listed(s)).filter((s) =>
      want.has(s.state) && (!template || s.templateID === template) && (!after || s.startedAt >= after)
      && Object.entries(metadata).every(([k, v]) => s.metadata[k] === v));
    const { page, next } = pageOf(items, { order: q.get('order'), limit: q.get('limit'), nextToken: q.get('nextToken') });
    sendJson(res, 200, page, next ? { 'x-next-token': next } : undefined);
  }

  private async info(caller: Caller, _req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    const s = await this.sandboxes.get(caller, id);
    // What the sandbox gets: its own rules within its template context's (or tenant's) policy.
    const { allowInternetAccess, ...lists } = e2bNetworkView(await this.ops.run(caller, 'network.effective', { context: s.row.spec.context, policy: s.row.spec.network }));
    sendJson(res, 200, {
      ...this.listed(s), envdAccessToken: s.e2b.accessToken, domain: null, allowInternetAccess,
      lifecycle: { onTimeout: s.e2b.onTimeout, autoResume: s.e2b.autoResume }, network: { allowPublicTraffic: !s.e2b.trafficToken, ...lists },
    });
  }

  private async kill(caller: Caller, _req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    await this.sandboxes.kill(caller, id);
    sendJson(res, 204);
  }

  private async timeout(caller: Caller, req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    const b = await readJson(req);
    if (b.timeout === undefined) throw invalid('timeout is required (seconds)');
    await this.sandboxes.setTimeout(caller, id, timeoutSeconds(b.timeout, DEFAULT_TIMEOUT_S));
    sendJson(res, 204);
  }

  private async refresh(caller: Caller, req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    const b = await readJson(req);
    await this.sandboxes.setTimeout(caller, id, timeoutSeconds(b.duration, DEFAULT_TIMEOUT_S));
    sendJson(res, 204);
  }

  /** `memory: false` (the SDK's `keepMemory: false`): the disk kept, the memory dropped; the resume boots it. */
  private async pause(caller: Caller, req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    const b = await readJson(req);
    const memory = optionalBoolean(b.memory, 'memory') ?? true;
    if (!(await this.sandboxes.pause(caller, id, memory))) throw new ShellbaseError('conflict', `sandbox ${id} is already paused`);
    sendJson(res, 204);
  }

  private async connect(caller: Caller, req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    const b = await readJson(req);
    if (optionalBoolean(b.memory, 'memory') === false) throw invalid('resuming without memory (a reboot) is not supported by shellbase');
    const { sandbox, resumed } = await this.sandboxes.connect(caller, id, timeoutSeconds(b.timeout, DEFAULT_TIMEOUT_S));
    sendJson(res, resumed ? 201 : 200, this.created(sandbox));
  }

  private async fork(caller: Caller, req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    const b = await readJson(req);
    const count = b.count ?? 1;
    if (typeof count !== 'number' || !Number.isInteger(count) || count < 1) throw invalid('count must be a positive whole number');
    const copies = await this.sandboxes.fork(caller, id, count, timeoutSeconds(b.timeout, DEFAULT_TIMEOUT_S));
    sendJson(res, 201, copies.map((s) => ({ sandbox: this.created(s) })));
  }

  private async snapshot(caller: Caller, req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    const b = await readJson(req);
    if (b.name !== undefined) throw invalid('snapshot names are not kept by shellbase', 'omit name; create sandboxes from the snapshotID');
    await this.sandboxes.get(caller, id);
    const snap = await this.ops.run(caller, 'machine.snapshot', { id });
    sendJson(res, 201, { snapshotID: snap.id, names: [snap.id] });
  }

  private async snapshots(caller: Caller, _req: IncomingMessage, res: ServerResponse, _p: string[], url: URL): Promise<void> {
    const sandbox = url.searchParams.get('sandboxID');
    const name = url.searchParams.get('name');
    const all = (await this.ops.run(caller, 'snapshot.list', {})).filter((s) => (!sandbox || s.machine === sandbox) && (!name || s.id === name));
    sendJson(res, 200, all.map((s) => ({ snapshotID: s.id, names: [s.id] })));
  }

  private async deleteSnapshot(caller: Caller, _req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    await this.ops.run(caller, 'snapshot.delete', { id });
    sendJson(res, 204);
  }

  private async metrics(caller: Caller, _req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    await this.sandboxes.get(caller, id);
    sendJson(res, 200, []);
  }

  /** Replaces a sandbox's egress rules: new connections follow them at once (open ones go on). */
  private async network(caller: Caller, req: IncomingMessage, res: ServerResponse, [id]: string[]): Promise<void> {
    const b = await readJson(req);
    unsupportedNetwork(b);
    await this.sandboxes.get(caller, id);
    await this.ops.run(caller, 'machine.setNetwork', { id, policy: e2bPolicy(b.allow_internet_access, b) ?? null });
    sendJson(res, 204);
  }
}

/** Egress options shellbase does not have: a 400 when set (empty values are accepted). */
function unsupportedNetwork(network: Record<string, unknown>): void {
  for (const k of ['rules', 'egressProxy', 'httpsPorts', 'maskRequestHost'] as const) {
    const v = network[k];
    if (v !== undefined && v !== null && !(Array.isArray(v) && v.length === 0) && !(typeof v === 'object' && Object.keys(v).length === 0)) {
      throw invalid(`network.${k} is not supported by shellbase`, 'leave it unset; allowOut (domains) and denyOut (all traffic) are');
    }
  }
}

/** `metadata=k%3Dv%26k2%3Dv2`: a query string inside the query, keys and values URL-encoded once more. */
function parseMetadataQuery(v: string | null): Record<string, string> {
  const out: Record<string, string> = {};
  if (!v) return out;
  for (const [k, val] of new URLSearchParams(v)) {
    try { out[decodeURIComponent(k)] = decodeURIComponent(val); } catch { throw invalid('metadata is not URL-encoded'); }
  }
  return out;
}

/** `volumeMounts: [{name, path}]`: each volume (a context of that name) copied in at its path, writable. */
function volumeMounts(v: unknown): { context: string; path: string }[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid('volumeMounts must be an array of {name, path}');
  return v.map((m: unknown) => {
    const o = (typeof m === 'object' && m !== null ? m : {}) as Record<string, unknown>;
    if (typeof o.name !== 'string' || typeof o.path !== 'string') throw invalid('each of volumeMounts is {name, path}', 'name a volume and the path it is seen at');
    return { context: o.name, path: o.path };
  });
}

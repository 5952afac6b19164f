import type { Context, ContextDefaults, ExecRequest, ExecResult, GcResult, Version } from '@shellbase/protocol';
import path from 'node:path';
import { ShellbaseError, invalid, notFound } from '../errors.js';
import { IMAGE_NAMES, imageBuilt, imageInfo } from '../images/index.js';
import { imageVersionId, parseImageLayer } from '../store/layer-ids.js';
import type { ContextRow, NewVersion, ServiceRow, VersionRow } from '../store/metadata/types.js';
import { Committer } from './commit.js';
import type { ContextAccess, ExecHooks } from '../core/contexts.js';
import { ExecRunner } from './exec.js';
import { Files } from './files/files.js';
import { GarbageCollector } from './gc.js';
import { Services } from './services/services.js';
import { History } from './history/history.js';
import { Tenants } from './tenants.js';
import { Usage } from './usage.js';
import { Squasher } from './squash.js';
import { Network } from '../core/network.js';
import { SYSTEM_TENANT, durably, type Caller, type Deps } from '../core/deps.js';
import { overQuota, quotasOf } from '../core/quotas.js';
import { checkCwd, checkEnv, checkName } from '../core/validate.js';
import { Images } from './images/images.js';
import { Builds } from './builds/builds.js';
import { checkUser, runAs } from './users.js';
import type { VersionView } from './files/view.js';
import { removeTree } from '../util/remove.js';
import { Transfer } from './transfer/index.js';
import type { MachineBackups } from '../core/backups.js';

/** What the engine asks of peer subsystems (machines), wired by the server. */
export interface EnginePeers {
  /** Bytes a tenant stores outside the layer store (machines' disks, snapshots, hibernated memory). */
  storedBytes?: (tenantId: string) => Promise<number>;
  /** Collects what garbage collection finds unused there (machines' templates); the number deleted. */
  collect?: () => Promise<number>;
  /** Machines' files for a server backup. */
  backups?: MachineBackups;
}

export interface CreateContextOptions {
  name: string;
  image?: string;
  from?: { context: string; version?: string };
  /** Labels added to its config. */
  labels?: Record<string, string>;
  /** Its tree starts empty. */
  empty?: boolean;
}

const toContext = (r: ContextRow): Context => ({
  name: r.name, head: r.head, image: r.image, createdAt: r.createdAt, updatedAt: r.updatedAt, ...(r.network ? { network: r.network } : {}),
  ...(r.defaults ? { defaults: r.defaults } : {}), ...(r.config ? { config: r.config } : {}),
});

/** Refuses defaults that a request could not carry either (400); returns them. */
function checkDefaults(d: ContextDefaults): ContextDefaults {
  if (d.env !== undefined) checkEnv(d.env);
  if (d.cwd !== undefined) checkCwd(d.cwd);
  if (d.user !== undefined) checkUser(d.user);
  return d;
}

const toVersion = (v: VersionRow): Version => ({
  id: v.id, parent: v.parent, createdAt: v.createdAt, cause: v.cause, bytes: v.bytes, ...(v.merged ? { merged: v.merged } : {}),
});

/**
 * The engine: contexts, versions and queries, for one tenant at a time. It
 * knows nothing of HTTP; every failure it reports is a ShellbaseError.
 */
export class Engine {
  readonly squasher: Squasher;
  /** Files without a sandbox. */
  readonly files: Files;
  /** Reset, diff and merge. */
  readonly history: History;
  /** Contexts as archives and OCI images, out and in (engine/transfer/). */
  readonly transfer: Transfer;
  /** Tenants and their keys (admin only). */
  readonly tenants: Tenants;
  /** The usage ledger, read back. */
  readonly usage: Usage;
  /** Drops old history and unreferenced layers. */
  readonly gc: GarbageCollector;
  /** Long-running processes over contexts, reached through the gateway. */
  readonly services: Services;
  /** Egress policies and the audit log. */
  readonly network: Network;
  /** Tenants' OCI images: pulled, imported, listed, deleted. */
  readonly images: Images;
  /** Dockerfile builds into contexts, with a step cache. */
  readonly builds: Builds;
  private readonly exec_: ExecRunner;

  constructor(readonly deps: Deps, peers: EnginePeers = {}) {
    this.squasher = new Squasher(deps);
    this.network = new Network(deps);
    const committer = new Committer(deps.metadata, deps.durability, deps.events);
    const lookups = {
      version: (caller: Caller, id: string) => this.version(caller, id),
      base: (caller: Caller, name: string, version?: string) => this.baseVersion(caller, name, version),
      head: async (caller: Caller, name: string) => this.version(caller, (await this.contextRow(caller, name)).head),
    };
    this.services = new Services(deps, committer, this.network, {
      getOrCreateContext: (caller, name) => this.getOrCreateContext(caller, name),
      head: lookups.head,
      runAs: async (caller, name, base, argv, fromString, req) => {
        const ctx = await this.contextRow(caller, name);
        return runAs(argv, fromString, req, ctx.defaults, () => this.files.viewOf(base), (IMAGE_NAMES as string[]).includes(ctx.image));
      },
      mountBase: (caller, m) => this.mountBase(caller, m.context, m.version),
      view: (v) => this.files.viewOf(v),
      headOrFresh: (caller, name) => this.headOrFresh(caller, name),
    });
    deps.egress.routeInternal((tenantId, context, host, port) => this.services.linkSocket(tenantId, context, host, port));
    this.files = new Files(deps, committer, this.squasher, lookups);
    this.images = new Images(deps, { version: lookups.version, imageVersion: (image) => this.imageVersion(image) });
    this.exec_ = new ExecRunner(deps, committer, this.squasher, {
      ...lookups, forwarding: (tenantId, context, own) => this.services.forwarding(tenantId, context, undefined, own),
      target: (caller, name, version, create) => this.target(caller, name, version, create),
      mountBase: (caller, name, version) => this.mountBase(caller, name, version),
      headOrFresh: (caller, name) => this.headOrFresh(caller, name),
      view: (v) => this.files.viewOf(v),
      builtIn: (image) => (IMAGE_NAMES as string[]).includes(image),
    }, this.network);
    this.builds = new Builds(deps, {
      start: (caller, image) => this.images.start(caller, image),
      pull: async (caller, ref, report) => { await this.images.pull(caller, { ref }, (p) => report(p.message)); },
      version: lookups.version,
      view: (v) => this.files.viewOf(v),
      exec: this.exec_,
    });
    this.history = new History(deps, committer, this.files, lookups);
    this.gc = new GarbageCollector(deps, peers.collect);
    this.transfer = new Transfer(deps, this.gc, peers.backups ?? null, (c, id) => this.version(c, id), (image) => this.imageVersion(image));
    this.tenants = new Tenants(deps.metadata, deps.config, deps.durability);
    this.usage = new Usage(deps.metadata, peers.storedBytes);
  }

  /** Crash recovery: removes sandboxes' cgroups, scratch space and unreferenced layers. */
  async recover(): Promise<void> {
    const { runtime, snapshotter: layers, metadata, log } = this.deps;
    const cgroups = await runtime.recover();
    const removed = await layers.recover((ids) => metadata.versions.knownLayers(ids));
    if (cgroups || removed.scratch || removed.layers) log.info({ cgroups, ...removed }, 'recovered after an unclean stop');
    // Imports spool their archives here; one a crash interrupted left its spool.
    await removeTree(path.join(this.deps.config.home, 'tmp'));
    await this.moveToRebuiltImages();
  }

  /**
   * The caller an `Authorization` header names, with a fresh hold: what its
   * operation looks up stays pinned until the caller releases the hold (the
   * API does when the response, streamed bodies included, is done).
   */
  async begin(authorization: string | undefined): Promise<Caller> {
    const who = await this.tenants.authenticate(authorization);
    return { ...who, hold: this.deps.pins.hold() };
  }

  /**
   * A caller acting for a tenant without its key (background work another API does for it:
   * E2B sandboxes' timers), with a fresh hold; not_found when the tenant is gone.
   */
  async callerFor(tenantId: string): Promise<Caller> {
    const tenant = await this.deps.metadata.tenants.get(tenantId);
    if (!tenant) throw new ShellbaseError('not_found', `tenant ${tenantId} is gone`);
    return { tenantId, admin: tenant.admin, ...(tenant.quotas ? { quotas: tenant.quotas } : {}), hold: this.deps.pins.hold() };
  }

  /** What peer subsystems (machines) use of contexts. */
  contextAccess(): ContextAccess {
    return {
      base: (caller, context, version) => this.baseVersion(caller, context, version),
      mountBase: (caller, context, version) => this.mountBase(caller, context, version),
      callerFor: (tenantId) => this.callerFor(tenantId),
      imageVersion: async (caller, image) => (await this.images.start(caller, image)).version,
      unbootable: async (v) => unbootable(await this.files.viewOf(v)),
      imageOf: async (caller, context) => (await this.deps.metadata.contexts.get(caller.tenantId, context))?.image ?? null,
      exec: (caller, context, req, hooks) => this.exec(caller, context, req, hooks),
      apply: (caller, context, base, deleted, body, description) => this.files.apply(caller, context, base, deleted, body, description),
    };
  }

  /**
   * An image whose recipe changed is a new build with a new layer id (the
   * recipe's version is the contract: version 2 stores ids shifted for user
   * namespaces). Versions on an older build of an image move to the current
   * build at start, so no sandbox mounts a build this server no longer makes.
   */
  private async moveToRebuiltImages(): Promise<void> {
    const { config, metadata, log } = this.deps;
    for (const id of await metadata.versions.imageLayers()) {
      const name = parseImageLayer(id)?.name;
      if (name === undefined || !(IMAGE_NAMES as string[]).includes(name) || !imageBuilt(config.cache, name)) continue;
      const current = imageInfo(config.cache, name).layerId;
      if (current === id) continue;
      const moved = await metadata.versions.replaceLayerPrefix([id], [current], { id: current, kind: 'image', bytes: 0, createdAt: new Date().toISOString() });
      if (moved) log.warn({ from: id, to: current, versions: moved }, 'versions moved to the rebuilt image');
    }
  }

  /** The root version of an image (made on first use of the image). */
  async imageVersion(image: string): Promise<VersionRow> {
    const { config, metadata } = this.deps;
    const info = imageInfo(config.cache, image);
    if (!imageBuilt(config.cache, image)) {
      throw new ShellbaseError('failed_precondition', `image ${image} is not built on this host`, {
        hint: `run \`npm run setup\` (or \`shellbase image build ${image}\`) first`,
      });
    }
    const id = imageVersionId(image, info.tag);
    const existing = await metadata.versions.get(id);
    if (existing) return existing;
    const now = new Date().toISOString();
    const version: NewVersion = {
      id, tenantId: SYSTEM_TENANT, parent: null, depth: 0, layers: [info.layerId], changes: null,
      cause: { kind: 'image' }, bytes: 0, createdAt: now,
    };
    await metadata.versions.ensureImage(version, { id: info.layerId, kind: 'image', bytes: 0, createdAt: now });
    return version;
  }

  /**
   * A version the caller may use (its own or an image's), pinned with its
   * layers until the caller's operation ends. The id is pinned before the row
   * is read, so garbage collection either keeps it or has already dropped it.
   */
  async version(caller: Caller, id: string): Promise<VersionRow> {
    if (typeof id !== 'string') throw notFound('version', String(id));
    caller.hold.version(id);
    const v = await this.deps.metadata.versions.get(id);
    if (!v || (v.tenantId !== caller.tenantId && v.tenantId !== SYSTEM_TENANT)) throw notFound('version', id);
    caller.hold.layerIds(v.layers);
    return v;
  }

  private async contextRow(caller: Caller, name: string): Promise<ContextRow> {
    checkName(name);
    const row = await this.deps.metadata.contexts.get(caller.tenantId, name);
    if (!row) throw notFound('context', name);
    return row;
  }

  /** With `empty`, its tree starts empty: one version hides every path of its image (a volume for data). */
  createContext(caller: Caller, opts: CreateContextOptions): Promise<Context> {
    if (opts.empty && opts.from) throw invalid('a context made from another is not empty', 'pass empty or from, not both');
    return durably(this.deps.durability, async () => {
      const made = await this.createContextRow(caller, opts);
      if (!opts.empty) return made;
      try {
        await this.files.clear(caller, opts.name);
      } catch (e) {
        // Not empty is not what was asked for: the context goes again.
        await this.deps.metadata.contexts.delete(caller.tenantId, opts.name).catch(() => undefined);
        throw e;
      }
      return this.getContext(caller, opts.name);
    });
  }

  /** A volume of a front door's (E2B's): an empty context with `labels` in its config, which mark it as one. */
  createVolume(caller: Caller, name: string, labels: Record<string, string>): Promise<Context> {
    return this.createContext(caller, { name, labels, empty: true });
  }

  private async createContextRow(caller: Caller, opts: CreateContextOptions): Promise<Context> {
    checkName(opts.name);
    let head: VersionRow;
    let image = opts.image ?? 'debian';
    let settings: Pick<ContextRow, 'defaults' | 'config' | 'network'> = {};
    if (opts.from) {
      const source = await this.contextRow(caller, opts.from.context);
      head = await this.version(caller, opts.from.version ?? source.head);
      image = source.image;
      settings = {
        ...(source.network ? { network: source.network } : {}), ...(source.defaults ? { defaults: source.defaults } : {}), ...(source.config ? { config: source.config } : {}),
      };
    } else {
      const start = await this.images.start(caller, image);
      head = start.version;
      image = start.image;
      settings = { ...(start.defaults ? { defaults: start.defaults } : {}), ...(start.config ? { config: start.config } : {}) };
    }
    const { contexts } = quotasOf(this.deps.config, caller);
    if ((await this.deps.metadata.contexts.count(caller.tenantId)) >= contexts) {
      throw overQuota('contexts', contexts, 'delete contexts you no longer need, or ask the admin for a higher quota');
    }
    if (opts.labels) settings = { ...settings, config: { ...settings.config, labels: { ...settings.config?.labels, ...opts.labels } } };
    const now = new Date().toISOString();
    const row: ContextRow = { tenantId: caller.tenantId, name: opts.name, head: head.id, image, createdAt: now, updatedAt: now, ...settings };
    if (!(await this.deps.metadata.contexts.create(row))) {
      throw new ShellbaseError('already_exists', `context ${JSON.stringify(opts.name)} already exists`, {
        details: { context: opts.name }, hint: 'pick another name, or use the existing context',
      });
    }
    return toContext(row);
  }

  /** Contexts are created from `debian` the first time a query names them. */
  /** A context's head, or (no such context) the version one made on first use would start from. */
  async headOrFresh(caller: Caller, name: string): Promise<VersionRow> {
    checkName(name);
    const row = await this.deps.metadata.contexts.get(caller.tenantId, name);
    return row ? this.version(caller, row.head) : (await this.images.start(caller, 'debian')).version;
  }

  async getOrCreateContext(caller: Caller, name: string): Promise<ContextRow> {
    checkName(name);
    const row = await this.deps.metadata.contexts.get(caller.tenantId, name);
    if (row) return row;
    try {
      await this.createContextRow(caller, { name });
    } catch (e) {
      if (!(e instanceof ShellbaseError && e.code === 'already_exists')) throw e;
    }
    return this.contextRow(caller, name);
  }

  /**
   * The version a query or file call works on: `version` if given, else the
   * context's head. An unknown version fails before the context is created
   * on first use, so a bad request leaves nothing behind.
   */
  async baseVersion(caller: Caller, name: string, version?: string): Promise<VersionRow> {
    const pinned = version === undefined ? null : await this.version(caller, version);
    const ctx = await this.getOrCreateContext(caller, name);
    return pinned ?? this.version(caller, ctx.head);
  }

  /**
   * The version a query runs over (`version`, else the head), its context (made on first use) and
   * the context's services, read in one statement. The head is pinned once read: a head is a root
   * of what garbage collection keeps, so it cannot have gone in between. `create: false`: a missing
   * context is `not_found` (nothing is made).
   */
  async target(caller: Caller, name: string, version?: string, create = true): Promise<{ base: VersionRow; context: ContextRow; services: ServiceRow[] }> {
    const pinned = version === undefined ? null : await this.version(caller, version);
    checkName(name);
    const contexts = this.deps.metadata.contexts;
    let state = await contexts.state(caller.tenantId, name);
    if (!state && !create) throw notFound('context', name);
    if (!state) {
      await this.getOrCreateContext(caller, name);
      state = await contexts.state(caller.tenantId, name);
      if (!state) throw notFound('context', name);
    }
    const { context, head, services } = state;
    if (pinned) return { base: pinned, context, services };
    if (!head || (head.tenantId !== caller.tenantId && head.tenantId !== SYSTEM_TENANT)) return { base: await this.version(caller, context.head), context, services };
    caller.hold.version(head.id);
    caller.hold.layerIds(head.layers);
    return { base: head, context, services };
  }

  /**
   * The version a mount of `name` shows: `version`, else the context's head (one lean read: no
   * context row, no services). A context that does not exist is not_found.
   */
  async mountBase(caller: Caller, name: string, version?: string): Promise<VersionRow> {
    if (version !== undefined) return (await this.target(caller, name, version, false)).base;
    checkName(name);
    const head = await this.deps.metadata.contexts.head(caller.tenantId, name);
    // No row (no such context, or a damaged store) or a head of another tenant: as target() finds it.
    if (!head || (head.tenantId !== caller.tenantId && head.tenantId !== SYSTEM_TENANT)) return (await this.target(caller, name, undefined, false)).base;
    caller.hold.version(head.id);
    caller.hold.layerIds(head.layers);
    return head;
  }

  async getContext(caller: Caller, name: string): Promise<Context> {
    return toContext(await this.contextRow(caller, name));
  }

  /** Replaces a context's defaults (`{}` clears them); its queries and services use them from their next start. */
  setDefaults(caller: Caller, name: string, defaults: ContextDefaults): Promise<Context> {
    return durably(this.deps.durability, async () => {
      await this.contextRow(caller, name);
      if (!(await this.deps.metadata.contexts.update(caller.tenantId, name, { defaults: checkDefaults(defaults), updatedAt: new Date().toISOString() }))) {
        throw notFound('context', name);
      }
      return toContext(await this.contextRow(caller, name));
    });
  }

  async listContexts(caller: Caller): Promise<Context[]> {
    return (await this.deps.metadata.contexts.list(caller.tenantId)).map(toContext);
  }

  deleteContext(caller: Caller, name: string): Promise<void> {
    return durably(this.deps.durability, async () => {
      checkName(name);
      await this.services.stopContext(caller.tenantId, name);
      if (!(await this.deps.metadata.contexts.delete(caller.tenantId, name))) throw notFound('context', name);
      this.gc.schedule();
    });
  }

  /** One garbage collection now (admin only); it also runs in the background. */
  collectGarbage(caller: Caller): Promise<GcResult> {
    if (!caller.admin) {
      throw new ShellbaseError('forbidden', 'only the admin key runs garbage collection', { hint: 'it runs in the background every few minutes' });
    }
    return durably(this.deps.durability, () => this.gc.run());
  }

  /** O(1): a new context row pointing at the same version. */
  async fork(caller: Caller, name: string, opts: { name: string; version?: string }): Promise<Context> {
    return this.createContext(caller, { name: opts.name, from: { context: name, version: opts.version } });
  }

  /** The context's history, newest first, from its head or (a page further) from the parent of `before`. */
  async versions(caller: Caller, name: string, limit = 100, before?: string): Promise<Version[]> {
    const row = await this.contextRow(caller, name);
    if (before === undefined) return (await this.deps.metadata.versions.lineage(row.head, limit)).map(toVersion);
    const from = await this.version(caller, before);
    return from.parent ? (await this.deps.metadata.versions.lineage(from.parent, limit)).map(toVersion) : [];
  }

  exec(caller: Caller, name: string, req: ExecRequest, hooks: ExecHooks = {}): Promise<ExecResult> {
    return this.exec_.exec(caller, name, req, hooks);
  }

  async close(): Promise<void> {
    await this.services.close();
    await this.gc.stop();
    await this.exec_.drain();
    await this.squasher.idle();
  }
}

/**
 * What a tree lacks to boot as a machine: machines hand over to /sbin/init,
 * which must be systemd (it starts the guest agent's unit). Null when it has it.
 */
function unbootable(view: VersionView): string | null {
  const init = view.find(['sbin', 'init'], false);
  if (!init) return 'it has no /sbin/init (machines boot systemd as PID 1)';
  let target = init;
  if (init.type === 'symlink') target = view.find(['sbin', 'init']) ?? init;
  const name = target.segments[target.segments.length - 1];
  if (target.type !== 'file' || name !== 'systemd') {
    return `its /sbin/init is not systemd (${init.type === 'symlink' ? `a link to ${view.readlink(init)}` : 'a program of its own'}); machines boot systemd as PID 1`;
  }
  return null;
}

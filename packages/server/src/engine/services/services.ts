import { mkdirSync } from 'node:fs';
import type { Socket } from 'node:net';
import path from 'node:path';
import { SERVICE_ACCESS, type CreateServiceRequest, type Service } from '@shellbase/protocol';
import { checkPolicy } from '../../net/policy.js';
import type { Network } from '../../core/network.js';
import { ShellbaseError, invalid, notFound } from '../../errors.js';
import type { ServiceRow, VersionRow } from '../../store/metadata/types.js';
import type { Committer } from '../commit.js';
import type { Hold } from '../../core/pins.js';
import { durably, type Caller, type Deps } from '../../core/deps.js';
import { overQuota, quotasOf } from '../../core/quotas.js';
import { newToken, gatewayUrls } from '../../util/tokens.js';
import { checkEnv, checkName, checkRange, checkTimeout, resolveLimits } from '../../core/validate.js';
import { ContextForwarding, type Forwarding } from './forwarding.js';
import { checkShare, ServiceLinks } from './links.js';
import { ServiceLog } from './log.js';
import { ServiceRun } from './run.js';
import type { RunAs, RunRequest } from '../users.js';
import { checkMountPoints } from '../mounts.js';
import { checkMounts, type MountAsked } from '../../core/mounts.js';
import type { VersionView } from '../files/view.js';

interface Lookups {
  getOrCreateContext(caller: Caller, name: string): Promise<unknown>;
  head(caller: Caller, name: string): Promise<VersionRow>;
  /** What a sandbox of the context runs with over `base` (its defaults applied: engine/users.ts). */
  runAs(caller: Caller, name: string, base: VersionRow, argv: string[], fromString: boolean, req: RunRequest): Promise<RunAs>;
  /** The version a mount shows now (its `version`, else its context's head); `not_found` when there is none. */
  mountBase(caller: Caller, mount: MountAsked): Promise<VersionRow>;
  /** A version's tree, read from its layers. */
  view(version: VersionRow): Promise<VersionView>;
  /** The context's head, or the version it would start from when made on first use. */
  headOrFresh(caller: Caller, name: string): Promise<VersionRow>;
}

const DEFAULT_IDLE_MS = 300_000;
const DEFAULT_START_MS = 30_000;


/**
 * Services: defined by a row, run on demand by a ServiceRun (one per service
 * while the server lives), reached through the gateway by token.
 */
export class Services {
  private readonly runs = new Map<string, ServiceRun>();

  private readonly forward: ContextForwarding;

  constructor(private readonly deps: Deps, private readonly committer: Committer, private readonly network: Network, private readonly lookups: Lookups) {
    mkdirSync(this.dir, { recursive: true, mode: 0o711 });
    this.forward = new ContextForwarding(this.dir, (row, inner) => this.join(row, inner));
    this.links = new ServiceLinks(deps.metadata);
    // A stale owner gives up: a run whose lease another worker took over stops (its writes are fenced).
    deps.cluster?.leaseLost((kind, key) => {
      const run = kind === 'service' ? this.runs.get(key) : undefined;
      if (!run) return;
      deps.log.warn({ service: run.row.name }, 'another worker took this service over (this one was taken for gone): stopping its run here');
      run.stop().catch((err: unknown) => deps.log.error({ err, service: run.row.name }, 'stopping a run whose lease was taken over failed'));
    });
  }

  /**
   * Joins a connection from a sandbox of a context allowed to reach the service (its own, or a
   * link) to it: here, or in a cluster through the internal tunnel of the worker that runs it.
   */
  private async join(row: ServiceRow, inner: Socket): Promise<void> {
    const run = this.runOf(row);
    const there = this.deps.peers ? await run.elsewhere() : null;
    if (!there) return run.pipe(inner);
    const up = await this.deps.peers!.tunnel(there.api, row.token);
    const done = () => { inner.destroy(); up.destroy(); };
    up.once('close', done);
    inner.once('close', done);
    up.on('error', done);
    inner.pipe(up).pipe(inner);
  }

  /** In a cluster: the API of the worker that runs the caller's service now, when not this one. */
  async elsewhere(caller: Caller, context: string, name: string): Promise<{ api: string } | null> {
    return this.runOf(await this.row(caller, context, name)).elsewhere();
  }

  /** Who reaches which shared service (links.ts). */
  private readonly links: ServiceLinks;

  /**
   * What a sandbox of the context needs so that the context's services (but
   * `except`, a service itself) answer on 127.0.0.1 and the services shared
   * with it at their names; null when there are none.
   */
  async forwarding(tenantId: string, context: string, except?: string, read?: ServiceRow[]): Promise<Forwarding | null> {
    // `read`: the context's services when the caller has just read them.
    const [own, links] = await Promise.all([read ?? this.deps.metadata.services.list(tenantId, context), this.links.linksOf(tenantId, context)]);
    return this.forward.forSandbox({ tenantId, context }, own, links, except);
  }

  /**
   * Where the egress proxy sends a sandbox of `context` that asks for
   * `host:port` under `.internal`: the Unix socket that wakes the service, if
   * the context may reach it; else throws why not (naming the service).
   */
  async linkSocket(tenantId: string, context: string, host: string, port: number): Promise<string> {
    const own = await this.deps.metadata.services.list(tenantId, context);
    const row = await this.links.resolve(tenantId, context, host, port, own);
    if (row.context === context) return this.forward.ownSocket({ tenantId, context }, row);
    return this.forward.linkSocket({ tenantId, context }, row);
  }

  /** Changes who else reaches a service by name (null: its own context only); links made before are cut. */
  share(caller: Caller, context: string, name: string, share: unknown): Promise<Service> {
    return durably(this.deps.durability, async () => {
      const row = await this.row(caller, context, name);
      const spec = { ...row.spec };
      if (share === null) delete spec.share; else spec.share = checkShare(share);
      const updated = { ...row, spec };
      if (!(await this.deps.metadata.services.update(updated))) throw notFound('service', name);
      this.links.invalidate(caller.tenantId);
      this.forward.close(row.token);
      const run = this.runs.get(row.token);
      if (run) run.row.spec = spec;
      return this.toService(updated);
    });
  }

  private get dir(): string { return path.join(this.deps.config.home, 'services'); }

  /** Where the gateway finds a service (its host label or path prefix carries the token). */
  urls(token: string): { url: string; pathUrl: string } {
    return gatewayUrls(this.deps.config.gatewayPort, token);
  }

  create(caller: Caller, context: string, req: CreateServiceRequest): Promise<Service> {
    return durably(this.deps.durability, () => this.define(caller, context, req));
  }

  private async define(caller: Caller, context: string, req: CreateServiceRequest): Promise<Service> {
    checkName(req.name, 'service');
    const { config } = this.deps;
    checkRange('port', req.port, 1, 65535);
    const command = req.command;
    if (!(typeof command === 'string' && command.length > 0) && !(Array.isArray(command) && command.length > 0 && command.every((a) => typeof a === 'string'))) {
      throw invalid('nothing to run', 'pass command as a string (run by bash -c) or a non-empty array (argv)');
    }
    const idleTimeoutMs = checkRange('idleTimeoutMs', req.idleTimeoutMs ?? DEFAULT_IDLE_MS, 100, 86_400_000);
    const { maximums } = quotasOf(config, caller);
    const startTimeoutMs = checkTimeout('startTimeoutMs', req.startTimeoutMs ?? Math.min(DEFAULT_START_MS, maximums.timeoutMs), maximums.timeoutMs, 100);
    resolveLimits(req.limits, undefined, config.defaults, maximums); // refuses what a query of the tenant may not ask for
    const access = req.access ?? 'url';
    if (!(SERVICE_ACCESS as readonly string[]).includes(access)) throw invalid(`access must be ${SERVICE_ACCESS.join(' or ')}`, '"key" makes the gateway want the tenant\'s API key as well as the URL');
    const mounts = checkMounts(context, req.mounts);
    const pinned = mounts.find((m) => !m.readOnly && m.version !== undefined);
    if (pinned) throw invalid(`the writable mount at ${pinned.path} names a version`, 'a service\'s writable mount follows its context\'s head at each start: pin read-only mounts only', { path: pinned.path });
    for (const m of mounts) await this.lookups.mountBase(caller, m); // each mounted context (and version) exists
    if (mounts.length) checkMountPoints(await this.lookups.view(await this.lookups.headOrFresh(caller, context)), context, mounts);
    await this.lookups.getOrCreateContext(caller, context);
    const network = req.network === undefined ? undefined : checkPolicy(req.network);
    const share = req.share === undefined ? undefined : checkShare(req.share);
    if (network) await this.network.effective(caller, context, network); // 403 when wider than the context's
    // Each service answers on 127.0.0.1:PORT inside the context's sandboxes: one port, one service.
    const taken = (await this.deps.metadata.services.list(caller.tenantId, context)).find((s) => s.spec.port === req.port);
    if (taken) {
      throw new ShellbaseError('already_exists', `port ${req.port} is taken by service ${taken.name} of context ${context}`, {
        details: { port: req.port, service: taken.name }, hint: 'use another port (the context\'s services share 127.0.0.1 inside its sandboxes)',
      });
    }
    const row: ServiceRow = {
      tenantId: caller.tenantId, context, name: req.name, token: newToken(), createdAt: new Date().toISOString(),
      spec: {
        format: mounts.length ? 3 : 2, command, port: req.port, env: checkEnv(req.env), idleTimeoutMs, startTimeoutMs, limits: req.limits ?? {}, access,
        ...(network ? { network } : {}), ...(share ? { share } : {}), ...(mounts.length ? { mounts } : {}),
      },
    };
    if (!(await this.deps.metadata.services.create(row))) {
      throw new ShellbaseError('already_exists', `context ${context} already has a service ${JSON.stringify(req.name)}`, {
        details: { service: req.name }, hint: 'pick another name, or delete the existing service first',
      });
    }
    this.links.invalidate(caller.tenantId);
    return this.toService(row);
  }

  async list(caller: Caller, context: string): Promise<Service[]> {
    checkName(context);
    return Promise.all((await this.deps.metadata.services.list(caller.tenantId, context)).map((r) => this.placed(this.toService(r), r)));
  }

  async get(caller: Caller, context: string, name: string): Promise<Service> {
    const row = await this.row(caller, context, name);
    return this.placed(this.toService(row), row);
  }

  /** In a cluster, a service asleep here but awake on another worker is `running` (its lease says where). */
  private async placed(s: Service, row: ServiceRow): Promise<Service> {
    if (s.state !== 'sleeping' || !this.deps.cluster) return s;
    return (await this.deps.cluster.elsewhere('service', row.token)) ? { ...s, state: 'running' } : s;
  }

  /** The run of a caller's service (what a TCP tunnel joins). */
  async target(caller: Caller, context: string, name: string): Promise<ServiceRun> {
    return this.runOf(await this.row(caller, context, name));
  }

  /** Puts the service to sleep now (its writes commit). */
  stop(caller: Caller, context: string, name: string): Promise<Service> {
    return durably(this.deps.durability, async () => {
      const row = await this.row(caller, context, name);
      await this.runs.get(row.token)?.stop();
      return this.toService(row);
    });
  }

  remove(caller: Caller, context: string, name: string): Promise<void> {
    return durably(this.deps.durability, async () => {
      const row = await this.row(caller, context, name);
      await this.runs.get(row.token)?.stop();
      this.runs.delete(row.token);
      this.forward.close(row.token);
      await this.deps.metadata.services.delete(caller.tenantId, context, name);
      this.links.invalidate(caller.tenantId);
      this.logOf(row.token).remove();
    });
  }

  async logs(caller: Caller, context: string, name: string, tail = 100): Promise<string> {
    const row = await this.row(caller, context, name);
    return this.logOf(row.token).tail(checkRange('tail', tail, 1, 10_000));
  }

  /** The run behind a gateway token; null for tokens no service has. */
  async byToken(token: string): Promise<ServiceRun | null> {
    if (!/^[a-z2-7]{26}$/.test(token)) return null;
    const existing = this.runs.get(token);
    if (existing) return existing;
    const row = await this.deps.metadata.services.byToken(token);
    return row ? this.runOf(row) : null;
  }

  /** Stops every run of a context (before it is deleted). */
  async stopContext(tenantId: string, context: string): Promise<void> {
    const runs = [...this.runs.values()].filter((r) => r.row.tenantId === tenantId && r.row.context === context);
    await Promise.all(runs.map((r) => r.stop()));
    for (const r of runs) { this.forward.close(r.row.token); this.runs.delete(r.row.token); }
    this.links.invalidate(tenantId);
  }

  /** Server shutdown: every service goes to sleep, its writes committed. */
  async close(): Promise<void> {
    await Promise.all([...this.runs.values()].map((r) => r.stop()));
    this.forward.close();
  }

  private runOf(row: ServiceRow): ServiceRun {
    let run = this.runs.get(row.token);
    if (!run) {
      const caller = (hold: Hold): Caller => ({ tenantId: row.tenantId, admin: false, hold });
      run = new ServiceRun(row, {
        deps: this.deps, committer: this.committer, log: this.logOf(row.token),
        head: (hold) => this.lookups.head(caller(hold), row.context),
        runAs: (hold, base, argv, fromString) => this.lookups.runAs(caller(hold), row.context, base, argv, fromString, { env: row.spec.env }),
        mounts: async (hold, base) => {
          const asked = row.spec.mounts ?? [];
          if (asked.length) checkMountPoints(await this.lookups.view(base), row.context, asked);
          return Promise.all(asked.map((m) => this.lookups.mountBase(caller(hold), m)));
        },
        admit: async () => {
          const tenant = await this.deps.metadata.tenants.get(row.tenantId);
          const { runningServices, tenantCpus, maximums } = quotasOf(this.deps.config, { quotas: tenant?.quotas });
          const awake = [...this.runs.values()].filter((r) => r.row.tenantId === row.tenantId && r.state !== 'sleeping').length;
          const over = () => overQuota('runningServices', runningServices, 'stop services you do not need (they also sleep when idle), or ask the admin for a higher quota');
          if (awake >= runningServices) throw over();
          const cluster = this.deps.cluster;
          if (cluster) {
            // In a cluster a service runs on one worker at a time (the one holding its lease), and
            // the quota counts the tenant's services awake on every live worker.
            const lease = await cluster.claim('service', row.token);
            if (!lease.mine) {
              throw new ShellbaseError('unavailable', `service ${row.name} is running on another worker`, { hint: 'retry: requests through the gateway are passed to that worker', details: { gateway: lease.gateway } });
            }
            if (!(await cluster.admit(row.tenantId, 'service', runningServices))) {
              await cluster.unclaim('service', row.token);
              throw over();
            }
            return { tenantCpus, maximums, fence: { kind: 'service', key: row.token, worker: cluster.workerId, epoch: lease.epoch } };
          }
          return { tenantCpus, maximums };
        },
        slept: async () => {
          const cluster = this.deps.cluster;
          if (!cluster) return;
          const failed = (err: unknown) => this.deps.log.error({ err, service: row.name }, 'giving up a service lease or quota slot failed');
          await Promise.all([cluster.release(row.tenantId, 'service').catch(failed), cluster.unclaim('service', row.token).catch(failed)]);
        },
        elsewhere: async () => (this.deps.cluster ? this.deps.cluster.elsewhere('service', row.token) : null),
        socketPath: path.join(this.dir, `${row.token}.sock`),
        forwarding: () => this.forwarding(row.tenantId, row.context, row.name),
        egress: async () => this.network.open(row.tenantId, row.context, 'service', await this.network.effectiveOf(row.tenantId, row.context, row.spec.network)),
      });
      this.runs.set(row.token, run);
    }
    return run;
  }

  private readonly logFiles = new Map<string, ServiceLog>();

  private logOf(token: string): ServiceLog {
    let l = this.logFiles.get(token);
    if (!l) { l = new ServiceLog(path.join(this.dir, `${token}.log`)); this.logFiles.set(token, l); }
    return l;
  }

  private async row(caller: Caller, context: string, name: string): Promise<ServiceRow> {
    checkName(context);
    checkName(name, 'service');
    const row = await this.deps.metadata.services.get(caller.tenantId, context, name);
    if (!row) throw notFound('service', name);
    return row;
  }

  private toService(r: ServiceRow): Service {
    return {
      name: r.name, context: r.context, command: r.spec.command, port: r.spec.port, ...this.urls(r.token),
      state: this.runs.get(r.token)?.state ?? 'sleeping', idleTimeoutMs: r.spec.idleTimeoutMs, access: r.spec.access,
      ...(r.spec.network ? { network: r.spec.network } : {}), ...(r.spec.share ? { share: r.spec.share } : {}),
      ...(r.spec.mounts ? { mounts: r.spec.mounts } : {}), createdAt: r.createdAt,
    };
  }
}


import { existsSync, readFileSync, rmSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import type { ServiceState, VersionCause } from '@shellbase/protocol';
import { ShellbaseError } from '../../errors.js';
import type { Bridge, HostPrograms, RunningSandbox, SandboxResult } from '../../runtime/types.js';
import type { CommittedLayer, Scratch } from '../../store/snapshotter/types.js';
import { collectMounts, commitParts, discardMounts, prepareMounts, volumesOf, withMounts, type Mounted } from '../mounts.js';
import type { LeaseFence, ServiceRow, VersionRow } from '../../store/metadata/types.js';
import { pipeThrough, type PortTarget } from '../../util/pipe.js';
import type { Committer } from '../commit.js';
import type { Hold } from '../../core/pins.js';
import type { Deps } from '../../core/deps.js';
import { resolveLimits } from '../../core/validate.js';
import type { Limits } from '../../config.js';
import { mergeForwarding, type Forwarding } from '../../net/forwarder.js';
import type { EgressSession } from '../../net/egress.js';
import { proxyEnv } from '../../net/proxy-env.js';
import type { ServiceLog } from './log.js';
import { SERVICE_LIFECYCLE, type ServiceEvent } from './lifecycle.js';
import { IdleLease } from '../../core/idle-lease.js';
import type { RunAs } from '../users.js';

/** SIGTERM, then this long before SIGKILL. */
const GRACE_MS = 5_000;
/** Longest a service may run without a stop (setTimeout's maximum). */
const FOREVER_MS = 2 ** 31 - 1;

export interface RunContext {
  deps: Deps;
  committer: Committer;
  /** The context's head, pinned by `hold` (the run's base). */
  head(hold: Hold): Promise<VersionRow>;
  /** What the sandbox runs with: the service's environment over the context's defaults, its cwd and user. */
  runAs(hold: Hold, base: VersionRow, argv: string[], fromString: boolean): Promise<RunAs>;
  /** The versions the service's mounts show in a run over `base` (pinned by `hold`); its mount points checked against `base`. */
  mounts(hold: Hold, base: VersionRow): Promise<VersionRow[]>;
  log: ServiceLog;
  /** Where the gateway reaches the service: a Unix socket bridged into the sandbox's network namespace. */
  socketPath: string;
  /**
   * Throws (429) when the tenant may not run one more service now; else the cores its sandboxes
   * share, the most a sandbox of the tenant may ask for (its quotas over the server's), and in a
   * cluster the lease the run holds (its writes commit only while it still does).
   */
  admit(): Promise<{ tenantCpus: number; maximums: Limits; fence?: LeaseFence }>;
  /** The context's other services on 127.0.0.1 inside this one's sandbox. */
  forwarding(): Promise<Forwarding | null>;
  /** An egress session under the service's effective policy (null: none). */
  egress(): Promise<EgressSession | null>;
  /** Told each time the run is back asleep (a cluster gives up the service's lease and slot); stop() waits for it. */
  slept?(): Promise<void>;
  /** In a cluster: the API and gateway URLs of the live worker that runs the service, when not this one. */
  elsewhere?(): Promise<{ api: string; gateway: string } | null>;
}

/**
 * One service's process, its lifecycle in one place:
 * sleeping → starting → running → stopping → sleeping.
 * `acquire()` wakes it (one start shared by every caller meanwhile) and counts
 * the caller as a user until it releases; with no user for `idleTimeoutMs` it
 * stops, and what it wrote commits to the context like a query's writes.
 */
export class ServiceRun implements PortTarget {
  state: ServiceState = 'sleeping';
  /** Requests and connections in flight; with none for idleTimeoutMs it stops. */
  private readonly lease = new IdleLease();
  private starting: Promise<void> | null = null;
  private stopping: Promise<void> | null = null;
  private ended: Promise<SandboxResult> | null = null;
  private sandbox: RunningSandbox | null = null;
  private bridge: Bridge | null = null;
  private abort: AbortController | null = null;
  /** The run's way out (null without egress). */
  private session: EgressSession | null = null;
  /** In a cluster: the lease this run started under (its writes are fenced by it). */
  private fence: LeaseFence | undefined;

  constructor(readonly row: ServiceRow, private readonly ctx: RunContext) {}

  /** Wakes the service if needed; resolves once its port accepts. Call `release` when done. */
  async acquire(): Promise<{ socketPath: string; release: () => void }> {
    const release = this.lease.acquire();
    try {
      await this.ensureRunning();
    } catch (e) {
      release();
      throw e;
    }
    return { socketPath: this.ctx.socketPath, release };
  }

  /**
   * Wakes the service and joins `client` to it as a byte pipe (after `preface`),
   * holding it awake until either side closes: WebSocket upgrades through the
   * gateway, and connections from the context's own sandboxes.
   */
  pipe(client: Duplex, preface: (string | Buffer)[] = []): Promise<void> {
    return pipeThrough(() => this.acquire(), client, preface);
  }

  get name(): string { return `service ${this.row.name}`; }

  get owner(): { tenantId: string; requireKey: boolean } {
    return { tenantId: this.row.tenantId, requireKey: this.row.spec.access === 'key' };
  }

  private async ensureRunning(): Promise<void> {
    for (;;) {
      if (this.state === 'running') return;
      if (this.stopping) { await this.stopping; continue; }
      this.starting ??= this.start().finally(() => { this.starting = null; });
      await this.starting;
    }
  }

  private async start(): Promise<void> {
    const { deps, log } = this.ctx;
    const { spec } = this.row;
    this.host();
    const { tenantCpus, maximums, fence } = await this.ctx.admit();
    this.fence = fence;
    this.go('wake');
    const hold = deps.pins.hold();
    const started = performance.now();
    let scratch: Scratch | null = null;
    let mounted: Mounted[] = [];
    // Once the sandbox is launched, finished() (or failed()) owns the scratches and the hold.
    let launched = false;
    try {
      const base = await this.ctx.head(hold);
      const limits = resolveLimits(spec.limits, undefined, deps.config.defaults, maximums);
      deps.snapshotter.ensure?.(base.layers).catch(() => undefined);
      // A read-only mount without a version shows its context's head at each start.
      mounted = await prepareMounts(deps.snapshotter, spec.mounts ?? [], await this.ctx.mounts(hold, base), limits.diskMb, async (v) => v);
      scratch = await deps.snapshotter.prepare({ diskMb: limits.diskMb });
      this.session = await this.ctx.egress();
      const fwd = mergeForwarding(await this.ctx.forwarding(), this.session?.forwarding());
      // The forwarder runs first, as the sandbox's root; then (with a user) the switch to the image's user.
      const { argv: preamble, binds, handOver } = deps.forwarder.wrap(fwd, []);
      const as = await this.ctx.runAs(hold, base, typeof spec.command === 'string' ? ['bash', '-c', spec.command] : spec.command, typeof spec.command === 'string');
      this.abort = new AbortController();
      log.append(`--- shellbase: starting ${JSON.stringify(spec.command)} over ${base.id}\n`);
      let sandbox!: RunningSandbox;
      const mount = await deps.snapshotter.mounts(base.layers, scratch);
      const volumes = mounted.length ? await volumesOf(deps.snapshotter, mounted, scratch) : undefined;
      const env = this.session ? { ...proxyEnv(), ...as.env } : as.env;
      const trusted = await deps.trust?.forSandbox(base.layers, env) ?? { env };
      this.ended = deps.runtime.run({
        mount, volumes, argv: as.argv, preamble, handOver, user: as.user, cwd: as.cwd, ...trusted, limits: { ...limits, timeoutMs: FOREVER_MS }, signal: this.abort.signal, binds, group: { id: this.row.tenantId, cpus: tenantCpus },
        stream: (_s, chunk) => log.append(chunk),
        onStart: (s) => { sandbox = s; },
      });
      launched = true;
      const ended = this.ended;
      const s = scratch;
      const m = mounted;
      void ended.then((result) => this.finished(result, base, s, m, hold, started), (err) => this.failed(err, s, m, hold));
      this.sandbox = sandbox;
      const inner = await Promise.race([sandbox.innerPid(), ended.then(() => { throw this.exitedEarly(); })]);
      // The bridge starts while the program does (socat connects per connection, so the port need
      // not be open yet); a program that listens on IPv6 only gets a bridge to [::1] instead.
      this.startBridge(inner, `TCP4:127.0.0.1:${spec.port}`);
      const target = await this.waitForPort(inner, spec.port, spec.startTimeoutMs, ended);
      if (!target.startsWith('TCP4:')) { this.bridge?.kill(); await this.bridge?.exited; this.startBridge(inner, target); }
      for (let i = 0; !existsSync(this.ctx.socketPath); i++) {
        if (i > 400) throw new Error('the gateway bridge did not start');
        await new Promise((r) => setTimeout(r, 5));
      }
      this.go('ready');
      this.lease.watch(spec.idleTimeoutMs, () => {
        if (this.state === 'running') this.stop().catch((err: unknown) => this.ctx.deps.log.error({ err, service: this.row.name }, 'stopping an idle service failed'));
      });
    } catch (e) {
      this.startError = (e as Error).message;
      if (launched) {
        await this.stop();
        await this.finishing;
      } else {
        hold.release();
        if (scratch) await deps.snapshotter.discard(scratch);
        await discardMounts(deps.snapshotter, mounted);
        await this.closeSession();
        this.go('startFailed');
      }
      if (e instanceof ShellbaseError) throw e;
      throw this.unavailable((e as Error).message);
    }
  }

  /** The host's programs services need (a bridge into the sandbox's network); absent in the fast tier. */
  private host(): HostPrograms {
    const { host } = this.ctx.deps;
    if (!host) throw new ShellbaseError('failed_precondition', 'services need a runtime that bridges into sandboxes (bwrap)', { hint: 'run the server with its bwrap runtime' });
    return host;
  }

  private startBridge(inner: number, target: string): void {
    rmSync(this.ctx.socketPath, { force: true });
    this.bridge = this.host().bridge({
      netnsPid: inner, socketPath: this.ctx.socketPath, target, backlog: 1024,
      onError: (text) => this.ctx.log.append(`--- shellbase: bridge: ${text}`),
    });
  }

  /** Why the start under way failed (reported when the service is asleep again). */
  private startError: string | null = null;

  /**
   * Moves along the lifecycle table (engine/services/lifecycle.ts) and reports it: woke on
   * running; asleep again, failed (a start that failed, a process that ended before it was
   * ready or on its own with a failure code, a sandbox that failed: `reason`) or slept.
   */
  private go(event: ServiceEvent, reason?: string, more: Record<string, unknown> = {}): void {
    const from = this.state;
    this.state = SERVICE_LIFECYCLE.next(this.row.name, this.state, event);
    if (this.state === 'sleeping' && this.ctx.slept) this.givenBack = this.ctx.slept();
    if (this.state !== 'running' && this.state !== 'sleeping') return;
    const why = reason ?? this.startError ?? (from === 'starting' ? 'the process ended before its port was ready' : undefined);
    if (this.state === 'sleeping') this.startError = null;
    const kind = this.state === 'running' ? 'service.woke' : why !== undefined ? 'service.failed' : 'service.slept';
    this.ctx.deps.events.emit({ tenantId: this.row.tenantId, kind, context: this.row.context, data: { service: this.row.name, ...more, ...(kind === 'service.failed' ? { reason: why } : {}) } });
  }

  /** The last slept() call: stop() resolves only once a cluster has its lease and slot back. */
  private givenBack: Promise<void> = Promise.resolve();

  /** While it sleeps here, where it runs instead (another worker of a cluster), if anywhere. */
  async elsewhere(): Promise<{ api: string; gateway: string } | null> {
    return this.state === 'sleeping' && this.ctx.elsewhere ? this.ctx.elsewhere() : null;
  }

  /** SIGTERM, a grace period, SIGKILL; the run's writes then commit. Resolves once it sleeps. */
  stop(): Promise<void> {
    if (this.state === 'sleeping' && !this.ended) return Promise.resolve();
    this.stopping ??= (async () => {
      // Already stopping (its process was told to end and its writes are being committed): waited for.
      if (this.state !== 'stopping') this.go('stop');
      this.lease.unwatch();
      const ended = this.ended;
      if (ended) {
        this.sandbox?.signal('SIGTERM');
        const timer = setTimeout(() => this.abort?.abort(), GRACE_MS);
        await ended.catch(() => undefined);
        clearTimeout(timer);
        await this.finishing;
      }
      await this.givenBack;
    })().finally(() => { this.stopping = null; });
    return this.stopping;
  }

  private finishing: Promise<void> | null = null;

  /** The process ended (asked to, idle, or on its own): bridge down, writes committed, usage recorded. */
  private finished(result: SandboxResult, base: VersionRow, scratch: Scratch, mounted: readonly Mounted[], hold: Hold, started: number): Promise<void> {
    this.finishing = (async () => {
      const { deps, committer, log } = this.ctx;
      this.bridge?.kill();
      this.bridge = null;
      rmSync(this.ctx.socketPath, { force: true });
      this.lease.unwatch();
      const traffic = await this.closeSession();
      log.append(`--- shellbase: exited (${result.signal ?? `code ${result.exitCode}`}) after ${Math.round(performance.now() - started)} ms\n`);
      let layer: CommittedLayer | null = null;
      try {
        const { written, refused } = await collectMounts(deps.snapshotter, mounted, true);
        layer = await deps.snapshotter.commit(scratch);
        const cause: VersionCause = {
          kind: 'service', command: `service ${this.row.name}`, exitCode: result.exitCode,
          ...(this.fence ? { lease: { worker: this.fence.worker, epoch: this.fence.epoch } } : {}),
        };
        const made = [layer, ...written].filter((l): l is CommittedLayer => l !== null);
        if (refused) {
          // A mount's writes could not be kept: none of the run's are committed (all or nothing).
          await deps.snapshotter.remove(made.map((l) => l.layerId)).catch(() => undefined);
          throw refused;
        }
        const fenced = async (e: unknown): Promise<null> => {
          // Fenced: another worker took the lease over (this one was taken for gone); its run's
          // writes count, not these. No version names the layers: they go (and their blobs, after the grace period).
          if (!(e instanceof ShellbaseError && e.code === 'failed_precondition')) throw e;
          await deps.snapshotter.remove(made.map((l) => l.layerId)).catch((err: unknown) => deps.log.warn({ err }, 'removing a fenced run\'s layers failed'));
          log.append(`--- shellbase: ${e.message}\n`);
          return null;
        };
        if (written.some(Boolean)) {
          // Writes through writable mounts commit with the service's own: every head moves, or none.
          const { parts } = commitParts(this.row.context, base, layer, cause, mounted, written);
          const outcomes = await committer.commitTogether(this.row.tenantId, parts, this.fence).catch(fenced);
          for (const [i, o] of (outcomes ?? []).entries()) {
            if (o.conflict) log.append(`--- shellbase: writes conflict with ${parts[i].context} on ${o.conflict.paths.join(', ')}; nothing committed, kept as version ${o.conflict.version}\n`);
          }
        } else if (layer) {
          const outcome = await committer.commit(this.row.tenantId, this.row.context, base, layer, withMounts(cause, mounted), this.fence).catch(fenced);
          if (outcome?.conflict) log.append(`--- shellbase: writes conflict with the context on ${outcome.conflict.paths.join(', ')}; kept as version ${outcome.conflict.version}\n`);
        }
        const activeMs = Math.min(this.lease.takeActiveMs(), result.wallMs);
        await deps.metadata.usage.record({
          tenantId: this.row.tenantId, context: this.row.context, kind: 'service', createdAt: new Date().toISOString(),
          cpuMs: result.cpuMs, wallMs: result.wallMs, memoryPeakBytes: result.memoryPeakBytes, bytesWritten: layer?.bytes ?? 0, exitCode: result.exitCode,
          egressBytes: traffic.bytesOut, ingressBytes: traffic.bytesIn, activeMs,
        });
        deps.meter.runEnded('service', result.wallMs, activeMs);
      } catch (err) {
        deps.log.error({ err, service: this.row.name }, 'committing a service run failed');
      } finally {
        hold.release();
        this.ended = null;
        this.sandbox = null;
        // Ended on its own while it served (not asked to stop), with a failure code: it failed.
        const crashed = this.state === 'running' && result.exitCode !== 0;
        this.go('exited', crashed ? `the process exited ${result.signal ? `on ${result.signal}` : `with code ${result.exitCode}`}` : undefined, { exitCode: result.exitCode });
      }
    })();
    return this.finishing;
  }

  private async failed(err: unknown, scratch: Scratch, mounted: readonly Mounted[], hold: Hold): Promise<void> {
    this.ctx.deps.log.error({ err, service: this.row.name }, 'service sandbox failed');
    this.ctx.log.append(`--- shellbase: sandbox failed: ${(err as Error).message}\n`);
    await this.ctx.deps.snapshotter.discard(scratch).catch(() => undefined);
    await discardMounts(this.ctx.deps.snapshotter, mounted);
    await this.closeSession();
    hold.release();
    this.ended = null;
    this.go('exited', `the sandbox failed: ${(err as Error).message}`);
  }

  /** Ends the run's egress session; the bytes it moved. */
  private async closeSession(): Promise<{ bytesOut: number; bytesIn: number }> {
    const s = this.session;
    this.session = null;
    return s ? s.close() : { bytesOut: 0, bytesIn: 0 };
  }

  /** Polls the sandbox's own TCP tables until something listens on `port`; the socat target for it. */
  private async waitForPort(inner: number, port: number, timeoutMs: number, ended: Promise<unknown>): Promise<string> {
    let exited = false;
    void ended.then(() => { exited = true; }, () => { exited = true; });
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (exited) throw this.exitedEarly();
      // 127.0.0.1 or 0.0.0.0 only: sbx-forward listens on 127.64.0.0/10 for links, maybe on this port too.
      const v4 = listening(`/proc/${inner}/net/tcp`, port);
      if (v4 === '0100007F' || v4 === '00000000') return `TCP4:127.0.0.1:${port}`;
      const v6 = listening(`/proc/${inner}/net/tcp6`, port);
      // [::] usually takes IPv4 too (bindv6only=0); [::1] does not.
      if (v6) return /^0+$/.test(v6) ? `TCP4:127.0.0.1:${port}` : `TCP6:[::1]:${port}`;
      if (Date.now() > deadline) throw this.unavailable(`nothing listened on port ${port} within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 5)); // two small file reads a poll
    }
  }

  private exitedEarly(): ShellbaseError {
    return this.unavailable('the service exited before its port opened');
  }

  unavailable(message: string): ShellbaseError {
    return new ShellbaseError('unavailable', `service ${this.row.name}: ${message}`, {
      details: { service: this.row.name, logs: this.ctx.log.tail(20) },
      hint: 'read the log lines in details.logs (or GET .../logs); the next request starts it again',
    });
  }
}

/** The (hex) address of a socket /proc/PID/net/tcp{,6} lists in LISTEN state on `port`, if any. */
function listening(file: string, port: number): string | null {
  let text = '';
  try { text = readFileSync(file, 'utf8'); } catch { return null; }
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  let found: string | null = null;
  for (const l of text.split('\n')) {
    const f = l.trim().split(/\s+/);
    if (!(f[1]?.endsWith(hex) && f[3] === '0A')) continue;
    const address = f[1].slice(0, -hex.length);
    // A link's listener (127.64.0.0/10, sbx-forward's) may share the port: the service's own address wins.
    if (address === '0100007F' || address === '00000000') return address;
    found ??= address;
  }
  return found;
}

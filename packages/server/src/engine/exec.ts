import type { ExecRequest, ExecResult, VersionCause } from '@shellbase/protocol';
import type { ExecHooks } from '../core/contexts.js';
import { ShellbaseError } from '../errors.js';
import type { Limits } from '../config.js';
import type { QueryOutcome } from '../meter/types.js';
import type { SandboxResult } from '../runtime/types.js';
import type { CommittedLayer } from '../store/snapshotter/types.js';
import type { ContextRow, ServiceRow, UsageRow, VersionRow } from '../store/metadata/types.js';
import type { CommitOutcome, Committer } from './commit.js';
import { checkStoredBytes, overQuota, quotasOf, type Quotas } from '../core/quotas.js';
import { mergeForwarding, type Bind, type Forwarding } from '../net/forwarder.js';
import { proxyEnv } from '../net/proxy-env.js';
import type { Network } from '../core/network.js';
import type { Traffic } from '../net/egress.js';
import type { Squasher } from './squash.js';
import type { Caller, Deps } from '../core/deps.js';
import { checkCommand, checkCwd, checkEnv, resolveLimits } from '../core/validate.js';
import type { VersionView } from './files/view.js';
import { checkUser, runAs } from './users.js';
import type { SandboxSpec, SandboxUser } from '../runtime/types.js';
import { applyTogether, checkMountPoints, collectMounts, commitParts, discardMounts, mountResults, prepareMounts, volumesOf, withMounts, type Mounted } from './mounts.js';
import { checkMounts, type MountAsked } from '../core/mounts.js';

interface Lookups {
  version(caller: Caller, id: string): Promise<VersionRow>;
  /** The version a query runs over (`version`, else the head) and its context (made on first use unless `create` is false: then a missing one is `not_found`). */
  target(caller: Caller, name: string, version?: string, create?: boolean): Promise<Target>;
  /** The version a mount of a context shows (`version`, else its head); a missing context is `not_found`. */
  mountBase(caller: Caller, name: string, version?: string): Promise<VersionRow>;
  view(version: VersionRow): Promise<VersionView>;
  /** The context's head, or the version it would start from when made on first use. */
  headOrFresh(caller: Caller, name: string): Promise<VersionRow>;
  /** Whether the context's image is a built-in one (its shell is bash). */
  builtIn(image: string): boolean;
  /** The context's services on 127.0.0.1 inside its sandboxes (null: it has none); `own`: its services, when just read. */
  forwarding(tenantId: string, context: string, own?: ServiceRow[]): Promise<Forwarding | null>;
}

type Target = { base: VersionRow; context: ContextRow; services: ServiceRow[] };

/** What one sandbox of a query runs. */
interface RunSpec {
  argv: string[];
  preamble?: string[];
  handOver?: SandboxSpec['handOver'];
  user?: SandboxUser;
  cwd: string;
  env: Record<string, string>;
  stdin?: string | Buffer;
  limits: Limits;
  binds?: Bind[];
  group: { id: string; cpus: number };
  /** In a cluster, when the query's slot was taken: it does not start if this worker's heartbeat lapsed since (Cluster.checkAlive). */
  admittedAt?: number;
}

/** `onConflict: "retry"` runs the command again on the new head at most this often. */
const MAX_RETRIES = 3;

/** Runs queries: sandbox over a version, then commit of what it wrote. */
export class ExecRunner {
  private readonly inflight = new Set<Promise<unknown>>();
  /** Queries running per tenant (the concurrentQueries quota). */
  private readonly running = new Map<string, number>();

  constructor(
    private readonly deps: Deps,
    private readonly committer: Committer,
    private readonly squasher: Squasher,
    private readonly lookups: Lookups,
    private readonly network: Network,
  ) {}

  async exec(caller: Caller, name: string, req: ExecRequest, hooks: ExecHooks): Promise<ExecResult> {
    const quotas = quotasOf(this.deps.config, caller);
    const running = this.running.get(caller.tenantId) ?? 0;
    const over = () => overQuota('concurrentQueries', quotas.concurrentQueries, 'wait for running queries to end, or ask the admin for a higher quota');
    if (running >= quotas.concurrentQueries) throw over();
    // In a cluster the quota counts the tenant's queries on every live worker (core/cluster.ts).
    const cluster = this.deps.cluster;
    // In a cluster, the query's target is read while its slot is taken (two round trips at once,
    // a refused query costing the read too); that early read makes nothing (a context made on
    // first use is made after admission).
    const early = cluster ? this.lookups.target(caller, name, req.version, false).catch(() => null) : null;
    if (cluster && !(await cluster.admit(caller.tenantId, 'query', quotas.concurrentQueries))) throw over();
    const admittedAt = cluster ? Date.now() : undefined;
    this.running.set(caller.tenantId, (this.running.get(caller.tenantId) ?? 0) + 1);
    // In a cluster the query's usage rows go with its slot's release (one round trip for both).
    const usage: UsageRow[] | null = cluster ? [] : null;
    const p = this.execTracked(caller, name, req, hooks, quotas, usage, early, admittedAt);
    this.inflight.add(p);
    try { return await p; } finally {
      this.inflight.delete(p);
      const left = (this.running.get(caller.tenantId) ?? 1) - 1;
      if (left > 0) this.running.set(caller.tenantId, left); else this.running.delete(caller.tenantId);
      await cluster?.release(caller.tenantId, 'query', usage ?? []).catch((err: unknown) => this.deps.log.error({ err, usage }, 'giving back a query slot (and recording its usage) failed'));
    }
  }

  /** Mount points found good, by version and paths (versions never change, so neither does the answer). */
  private readonly goodMountPoints = new Set<string>();

  private async checkMountPoints(base: VersionRow, name: string, asked: readonly MountAsked[]): Promise<void> {
    const key = `${base.id}\0${asked.map((m) => m.path).join('\0')}`;
    if (this.goodMountPoints.has(key)) return;
    checkMountPoints(await this.lookups.view(base), name, asked);
    if (this.goodMountPoints.size >= 10_000) this.goodMountPoints.clear();
    this.goodMountPoints.add(key);
  }

  /** Waits for running queries to finish (shutdown). */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.inflight]);
  }

  /**
   * `usage`: where the query's usage rows wait for its release (a cluster); null: recorded at once.
   * `early`: the target as read beside the admission (null when that read failed: it is read again here).
   */
  private async execTracked(caller: Caller, name: string, req: ExecRequest, hooks: ExecHooks, quotas: Quotas, usage: UsageRow[] | null,
    early: Promise<Target | null> | null, admittedAt?: number): Promise<ExecResult> {
    const { config } = this.deps;
    const command = checkCommand(req);
    const limits = resolveLimits(req.limits, req.timeoutMs, config.defaults, quotas.maximums);
    await checkStoredBytes(this.deps.metadata, caller.tenantId, quotas);
    if (req.cwd !== undefined) checkCwd(req.cwd);
    checkEnv(req.env);
    if (req.user !== undefined) checkUser(req.user);
    const asked = checkMounts(name, req.mounts);
    // Mounted contexts are found (or refused) before the query's own is made on first use: it is
    // read beside them, and made only once they are found.
    const lookup = (m: MountAsked) => this.lookups.mountBase(caller, m.context, m.version);
    const [bases, own] = await Promise.all([
      Promise.all(asked.map(lookup)),
      (early ?? this.lookups.target(caller, name, req.version, asked.length === 0)).catch((e: unknown) => {
        if (asked.length && e instanceof ShellbaseError && e.code === 'not_found') return null;
        throw e;
      }),
    ]);
    let found: VersionRow[] | null = bases;
    // A context made on first use is made only once its mount points are found good.
    if (asked.length && !own) await this.checkMountPoints(req.version ? await this.lookups.version(caller, req.version) : await this.lookups.headOrFresh(caller, name), name, asked);
    const target = own ?? await this.lookups.target(caller, name, req.version);
    let base = target.base;
    const { context } = target;
    if (asked.length) await this.checkMountPoints(base, name, asked);
    const as = await runAs(command, req.command !== undefined, req, context.defaults, () => this.lookups.view(target.base), this.lookups.builtIn(context.image));
    const { argv, env, user } = as;
    const cwd = checkCwd(as.cwd);
    const policy = await this.network.effective(caller, name, req.network, context);
    for (let retries = 0; ; retries++) {
      // Each run has its own egress session (none at all without egress): its bytes are the run's.
      const session = await this.network.open(caller.tenantId, name, 'query', policy);
      let ran: Awaited<ReturnType<ExecRunner['runOnce']>>;
      let traffic: Traffic | null = null;
      try {
        // The services read with the target serve its first run; a retry on a newer head reads them again.
        const own = retries === 0 ? target.services : undefined;
        const fwd = mergeForwarding(await this.lookups.forwarding(caller.tenantId, name, own), session?.forwarding());
        // The forwarder runs first, as the sandbox's root; then (with a user) the switch to the image's user.
        const wrapped = this.deps.forwarder.wrap(fwd, []);
        const group = { id: caller.tenantId, cpus: quotas.tenantCpus };
        const spec: RunSpec = {
          argv, preamble: wrapped.argv, handOver: wrapped.handOver, user, cwd, env: session ? { ...proxyEnv(), ...env } : env, stdin: hooks.stdin ?? req.stdin, limits, binds: wrapped.binds, group, admittedAt,
        };
        const bases = found ?? await Promise.all(asked.map(lookup));
        found = null;
        ran = await this.runOnce(base, spec, hooks, req.commit ?? 'always', asked, bases);
      } finally {
        if (session) traffic = await session.close();
      }
      const { run, layer, bytesWritten, refused, mounted, written } = ran;
      const result = resultOf(run, base.id, bytesWritten, limits, quotas.maximums.timeoutMs);
      if (traffic) Object.assign(result.usage, { egressBytes: traffic.bytesOut, ingressBytes: traffic.bytesIn });
      const row: UsageRow = {
        tenantId: caller.tenantId, context: name, kind: 'query', createdAt: new Date().toISOString(), cpuMs: run.cpuMs,
        wallMs: run.wallMs, memoryPeakBytes: run.memoryPeakBytes, bytesWritten, exitCode: run.exitCode,
        egressBytes: traffic?.bytesOut ?? 0, ingressBytes: traffic?.bytesIn ?? 0,
      };
      if (usage) usage.push(row); else await this.deps.metadata.usage.record(row);
      if (refused) {
        this.deps.meter.queryEnded(outcomeOf(run), run.wallMs, 'discarded');
        throw refused;
      }
      if (retries > 0) result.retries = retries;
      if (mounted.length) result.mounts = mountResults(mounted);
      const cause = hooks.cause ?? { kind: 'exec', command: describe(req), exitCode: run.exitCode };
      if (!layer && !written.some(Boolean)) {
        this.deps.meter.queryEnded(outcomeOf(run), run.wallMs, bytesWritten > 0 ? 'discarded' : 'nothing');
        return result;
      }
      let head: string | null;
      if (!written.some(Boolean)) {
        const outcome = await this.committer.commit(caller.tenantId, name, base, layer!, withMounts(cause, mounted));
        applyOutcome(result, outcome);
        this.deps.meter.queryEnded(outcomeOf(run), run.wallMs, outcome.committed ? 'committed' : 'conflict');
        if (outcome.committed) this.squasher.maybeSquash(caller.tenantId, name, outcome.layerCount);
        head = outcome.head;
      } else {
        // Writes through writable mounts commit with the query's own: every head moves, or none.
        const { parts, index } = commitParts(name, base, layer, cause, mounted, written);
        const outcomes = await this.committer.commitTogether(caller.tenantId, parts);
        const own = applyTogether(result, mounted, layer !== null, index, outcomes);
        this.deps.meter.queryEnded(outcomeOf(run), run.wallMs, outcomes[0].committed ? 'committed' : 'conflict');
        outcomes.forEach((o, i) => { if (o.committed) this.squasher.maybeSquash(caller.tenantId, parts[i].context, o.layerCount); });
        head = own ? own.head : null;
      }
      if (!result.conflict || req.onConflict !== 'retry' || retries >= MAX_RETRIES || hooks.signal?.aborted) {
        return result;
      }
      base = head ? await this.lookups.version(caller, head) : (await this.lookups.target(caller, name)).base;
    }
  }

  /**
   * One build step's sandbox (a Dockerfile RUN) over `base`, under the context's
   * egress policy: its writes as a layer when it exits 0, metered as a query
   * of `context`. No head moves (the build records the version).
   */
  async runStep(caller: Caller, context: string, base: VersionRow, step: { argv: string[]; env: Record<string, string>; cwd: string; user?: SandboxUser },
    hooks: ExecHooks): Promise<{ run: SandboxResult; layer: CommittedLayer | null }> {
    const quotas = quotasOf(this.deps.config, caller);
    const limits = resolveLimits({}, quotas.maximums.timeoutMs, this.deps.config.defaults, quotas.maximums);
    await checkStoredBytes(this.deps.metadata, caller.tenantId, quotas);
    const session = await this.network.open(caller.tenantId, context, 'query', await this.network.effective(caller, context));
    let ran: Awaited<ReturnType<ExecRunner['runOnce']>>;
    let traffic: Traffic | null = null;
    try {
      const wrapped = this.deps.forwarder.wrap(mergeForwarding(session?.forwarding()), []);
      ran = await this.runOnce(base, {
        argv: step.argv, preamble: wrapped.argv, handOver: wrapped.handOver, user: step.user, cwd: step.cwd, env: session ? { ...proxyEnv(), ...step.env } : step.env,
        limits, binds: wrapped.binds, group: { id: caller.tenantId, cpus: quotas.tenantCpus },
      }, hooks, 'on-success');
    } finally {
      if (session) traffic = await session.close();
    }
    const { run, layer, bytesWritten, refused } = ran;
    await this.deps.metadata.usage.record({
      tenantId: caller.tenantId, context, kind: 'query', createdAt: new Date().toISOString(), cpuMs: run.cpuMs,
      wallMs: run.wallMs, memoryPeakBytes: run.memoryPeakBytes, bytesWritten, exitCode: run.exitCode,
      egressBytes: traffic?.bytesOut ?? 0, ingressBytes: traffic?.bytesIn ?? 0,
    });
    this.deps.meter.queryEnded(outcomeOf(run), run.wallMs, layer ? 'committed' : 'nothing');
    if (refused) throw refused;
    return { run, layer };
  }

  /**
   * Runs the sandbox; its writes become a layer only when the commit mode wants them. `asked`:
   * the query's mounts, each showing the version in `bases`; `written` has each writable mount's
   * layer (null for read-only ones and those that wrote nothing).
   */
  private async runOnce(
    base: VersionRow,
    spec: RunSpec,
    hooks: ExecHooks,
    mode: string,
    asked: readonly MountAsked[] = [],
    bases: readonly VersionRow[] = [],
  ): Promise<{ run: SandboxResult; layer: CommittedLayer | null; bytesWritten: number; refused?: unknown; mounted: Mounted[]; written: (CommittedLayer | null)[] }> {
    const { snapshotter: layers, runtime } = this.deps;
    base = await this.squasher.mountable(base);
    // A worker that lacks the layers fetches them while the scratch is made (`mounts` waits for them).
    layers.ensure?.(base.layers).catch(() => undefined);
    const mounted = await prepareMounts(layers, asked, bases, spec.limits.diskMb, (v) => this.squasher.mountable(v));
    const scratch = await layers.prepare({ diskMb: spec.limits.diskMb }).catch(async (e: unknown) => { await discardMounts(layers, mounted); throw e; });
    let run: SandboxResult;
    try {
      const mount = await layers.mounts(base.layers, scratch);
      const volumes = mounted.length ? await volumesOf(layers, mounted, scratch) : undefined;
      // The host's authorities above the layers (never among the writes), their variables under the command's.
      const trusted = await this.deps.trust?.forSandbox(base.layers, spec.env) ?? { env: spec.env };
      if (spec.admittedAt !== undefined) this.deps.cluster?.checkAlive(spec.admittedAt);
      run = await runtime.run({
        mount, volumes, argv: spec.argv, preamble: spec.preamble, handOver: spec.handOver, user: spec.user, ...trusted,
        cwd: spec.cwd, stdin: spec.stdin, limits: spec.limits, onOutput: hooks.onOutput, signal: hooks.signal, binds: spec.binds,
        group: spec.group,
      });
    } catch (e) {
      await layers.discard(scratch);
      await discardMounts(layers, mounted);
      throw e;
    }
    // The sandbox ran (and is metered) even when its writes cannot be kept (a path too deep).
    const keep = wantsCommit(mode, run);
    const { written, bytes: bytesWritten, refused } = await collectMounts(layers, mounted, keep);
    // Writes that cannot all be kept are none of them kept (a mount's and the query's own commit together).
    const dropped = async (made: (CommittedLayer | null)[], why: unknown) => {
      await layers.remove(made.filter((l): l is CommittedLayer => l !== null).map((l) => l.layerId)).catch(() => undefined);
      return { run, layer: null, bytesWritten: 0, refused: why, mounted, written: written.map(() => null) };
    };
    try {
      if (!keep) return { run, layer: null, bytesWritten: bytesWritten + await layers.release(scratch), mounted, written, refused };
      if (refused) { await layers.discard(scratch); return dropped(written, refused); }
      const layer = await layers.commit(scratch);
      return { run, layer, bytesWritten: bytesWritten + (layer?.bytes ?? 0), mounted, written };
    } catch (e) {
      return dropped(written, e);
    }
  }
}

function describe(req: ExecRequest): string {
  const text = req.command ?? JSON.stringify(req.argv);
  return text.length > 1000 ? `${text.slice(0, 1000)}…` : text;
}

function outcomeOf(run: SandboxResult): QueryOutcome {
  if (run.timedOut) return 'timeout';
  if (run.oomKilled) return 'oom';
  if (run.aborted) return 'aborted';
  return run.exitCode === 0 ? 'ok' : 'failed';
}

function wantsCommit(mode: string, run: SandboxResult): boolean {
  if (mode === 'never') return false;
  if (mode === 'on-success') return outcomeOf(run) === 'ok';
  return true;
}

/** `maxTimeoutMs`: the tenant's maximum, which a timed-out result names beside the limit it met. */
function resultOf(run: SandboxResult, baseId: string, bytesWritten: number, limits: Limits, maxTimeoutMs: number): ExecResult {
  const result: ExecResult = {
    exitCode: run.exitCode,
    timedOut: run.timedOut,
    oomKilled: run.oomKilled,
    stdout: run.stdout,
    stderr: run.stderr,
    truncated: run.truncated,
    baseVersion: baseId,
    version: baseId,
    committed: false,
    usage: { cpuMs: run.cpuMs, wallMs: run.wallMs, memoryPeakBytes: run.memoryPeakBytes, bytesWritten },
  };
  if (run.signal) result.signal = run.signal;
  if (run.timedOut) result.limit = { name: 'timeoutMs', value: limits.timeoutMs, max: maxTimeoutMs };
  if (run.stderr.includes('Disk quota exceeded') || bytesWritten >= limits.diskMb * 1024 * 1024 * 0.95) {
    result.diskLimitHit = true;
  }
  return result;
}

function applyOutcome(result: ExecResult, outcome: CommitOutcome): void {
  result.version = outcome.head;
  result.committed = outcome.committed;
  if (outcome.conflict) result.conflict = outcome.conflict;
}

import { chmodSync, copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import path from 'node:path';
import { USERNS_SPEC } from '../../util/idmap.js';
import { SBX, SBX_TARCHECK, SBX_USER } from '../../util/native.js';
import type { Cgroup, CgroupDriver } from '../cgroups/index.js';
import type { CgroupLimits } from '../cgroups/types.js';
import { HAS_CURL } from '../../util/curl.js';
import type { Readable } from 'node:stream';
import type { Bridge, BridgeSpec, HelperSpec, JailSpec, LayerCompression, RemoteBlob, Runtime, SandboxResult, SandboxSpec, SandboxUser, UnpackOptions, UnpackedLayer } from '../types.js';
import type { Dialer } from '../../util/dialer.js';
import { bridge, gunzipConfined, hasIgzip, jail, runHelper, unpackLayerConfined, unpackTar } from './helpers.js';
import { SECCOMP_FD, bwrapArgs } from './args.js';
import { CappedOutput } from './output.js';
import { spawner, type SpawnHandlers, type Spawned } from '../../util/spawner.js';
import { WarmPool, type WarmPoolOptions } from './warm-pool.js';
import { warmJob } from './warm-job.js';
import { MountPoints, overlayArgs, stacked } from './volumes.js';
import { Views } from './views.js';

/** Open files per sandbox process (soft and hard limit): thousands, not the host's table. */
export const OPEN_FILES = 4096;

const SIGNAL_NAMES = new Map<number, string>(
  Object.entries(constants.signals).map(([name, n]) => [n, name]),
);

/**
 * Runs sandboxes with bubblewrap. Per sandbox, one process is started (by
 * the spawner, so the server itself never forks): `sbx run` joins the cgroup,
 * mounts the overlay in a private mount namespace, enters the sandboxes' user
 * namespace (util/idmap.ts) and execs bwrap. Killing that process (timeout, abort, server death) kills the
 * sandbox's pid namespace and with it every process of the query.
 */
export class BwrapRuntime implements Runtime {
  /** The static `sbx-user` a sandbox's root can reach (the checkout may be below a home it cannot pass). */
  private readonly userShim: string;
  /** sbx-tarcheck where the sandboxes' root can read it. */
  private readonly tarcheck: string;
  private readonly warm: WarmPool | null;
  /** Mount points of volumes (in the helpers directory; none without one). */
  private readonly points: MountPoints | null;
  /** Read-only volumes' views, which warm sandboxes bind (with a helpers directory and a warm pool). */
  private readonly views: Views | null;

  /**
   * `dialer`: starts the programs a stream goes through (a layer's tar and decompressor). `helpers`: a directory the sandboxes' root can reach, for copies of the helpers run inside
   * sandboxes. With `warm`, queries start in sandboxes made ahead (warm-pool.ts) whenever one is ready.
   */
  private readonly dialer: Dialer;

  constructor(private readonly cgroups: CgroupDriver, options: { dialer: Dialer; helpers?: string; warm?: Omit<WarmPoolOptions, 'nofile'> }) {
    this.userShim = SBX_USER;
    this.tarcheck = SBX_TARCHECK;
    this.dialer = options.dialer;
    this.points = options.helpers ? new MountPoints(path.join(options.helpers, 'mountpoints')) : null;
    if (options.helpers) {
      mkdirSync(options.helpers, { recursive: true, mode: 0o711 });
      this.userShim = path.join(options.helpers, 'sbx-user');
      copyFileSync(SBX_USER, this.userShim);
      chmodSync(this.userShim, 0o755);
      this.tarcheck = path.join(options.helpers, 'sbx-tarcheck');
      copyFileSync(SBX_TARCHECK, this.tarcheck);
      chmodSync(this.tarcheck, 0o755);
    }
    this.warm = options.warm ? new WarmPool({ ...options.warm, nofile: OPEN_FILES }) : null;
    this.views = this.warm && options.helpers ? new Views(path.join(options.helpers, 'views'), options.warm?.onError) : null;
  }

  /** Starts what the runtime keeps ready (the warm pool); before it, every sandbox starts cold. */
  async start(): Promise<void> {
    await this.warm?.start();
  }

  /**
   * The command line inside the sandbox: the preamble (as root), then the user switch, then the
   * command. A cold sandbox with hand-over ports runs sbx-forward for them first; a warm one's
   * pid 1 serves them (`hands`).
   */
  private commandLine(spec: SandboxSpec, warm: boolean): { argv: string[]; binds: NonNullable<SandboxSpec['binds']>; hands: string[] } {
    const binds = [...(spec.binds ?? [])];
    const argv = [...(spec.preamble ?? [])];
    const hands = spec.handOver?.ports ?? [];
    if (hands.length && !warm) {
      const { forwarder } = spec.handOver!;
      if (!binds.some((b) => b.target === forwarder.target)) binds.push(forwarder); // bound already when it also relays
      argv.unshift(forwarder.target, ...hands, '--');
    }
    if (spec.user) {
      binds.push({ source: this.userShim, target: USER_SHIM, readOnly: true });
      argv.push(...userArgs(spec.user));
    }
    return { argv: [...argv, ...spec.argv], binds, hands: warm ? hands : [] };
  }

  cgroup(limits: CgroupLimits): Cgroup {
    return this.cgroups.acquire(limits);
  }

  unpackTar(body: Readable, into: { source: string }): Promise<void> { return unpackTar(this.dialer, body, into); }
  gunzip(body: AsyncIterable<Buffer>): AsyncIterable<Buffer> | null { return hasIgzip ? gunzipConfined(this.dialer, body) : null; }
  /** Where curl is missing, layers come through the server as before. */
  readonly fetchesLayers = HAS_CURL;
  unpackLayer(body: Readable | RemoteBlob, compression: LayerCompression, into: { source: string }, opts: UnpackOptions = {}): Promise<UnpackedLayer> | null {
    return unpackLayerConfined(this.dialer, this.tarcheck, body, compression, into, opts);
  }
  runHelper(spec: HelperSpec): Promise<void> { return runHelper(spec); }
  bridge(spec: BridgeSpec): Bridge { return bridge(spec); }
  jail(spec: JailSpec, handlers: { onStderr(chunk: Buffer): void }): Spawned { return jail(spec, handlers); }

  recover(): Promise<number> {
    return this.cgroups.recover();
  }

  private readonly removals = new Set<Promise<void>>();

  async close(): Promise<void> {
    await this.warm?.close();
    await this.views?.close();
    await Promise.all([...this.removals]);
    return this.cgroups.close();
  }

  /**
   * Running sandboxes per group: their CPU weights add up to 1, and their CPU
   * caps to the group's cores (each keeps its own limit when that is lower).
   */
  private readonly groups = new Map<string, Map<Cgroup, number>>();

  private rebalance(group: string, cores: number): void {
    const members = this.groups.get(group);
    if (!members) return;
    if (members.size === 0) { this.groups.delete(group); return; }
    for (const [cg, own] of members) {
      cg.setWeight(1 / members.size);
      cg.setCpuCap(Math.min(own, cores / members.size));
    }
  }

  async run(spec: SandboxSpec): Promise<SandboxResult> {
    const { limits, group } = spec;
    const cgroup = this.cgroups.acquire(limits);
    if (group !== undefined) {
      let members = this.groups.get(group.id);
      if (!members) { members = new Map(); this.groups.set(group.id, members); }
      members.set(cgroup, limits.cpus);
      this.rebalance(group.id, group.cpus);
    }
    const started = performance.now();
    const capped = (name: 'stdout' | 'stderr', fd: 1 | 2) =>
      new CappedOutput(limits.outputBytes, spec.onOutput && ((d) => spec.onOutput!(name, d)), () => spawned.discard(fd));
    let stdout = capped('stdout', 1);
    let stderr = capped('stderr', 2);
    const { stream } = spec;
    const handlers = stream ? {
      onStdout: (c: Buffer) => stream('stdout', c),
      onStderr: (c: Buffer) => stream('stderr', c),
    } : {
      onStdout: (c: Buffer) => stdout.push(c),
      onStderr: (c: Buffer) => stderr.push(c),
    };
    // Warm: sandboxes without stdin that nobody watches start (services need the cold path's pid).
    const warm = this.warm && !stream && !spec.onStart && !spec.stdin?.length
      ? this.warm.take(warmJob({ mount: stacked(spec, this.points), volumes: overlayArgs(spec, this.points, this.views), joinFiles: cgroup.joinFiles, ...this.commandLine(spec, true), env: spec.env, cwd: spec.cwd }), handlers)
      : null;
    let spawned = warm ? warm.spawned : this.startCold(spec, cgroup, handlers);
    spec.onStart?.({ innerPid: () => innerPid(spawned.pid), signal: (sig) => cgroup.signal(sig) });

    let timedOut = false;
    let aborted = false;
    const kill = () => { spawned.kill(); void cgroup.kill(); };
    const timer = setTimeout(() => { timedOut = true; kill(); }, limits.timeoutMs);
    const onAbort = () => { aborted = true; kill(); };
    spec.signal?.addEventListener('abort', onAbort, { once: true });
    if (spec.signal?.aborted) onAbort();

    try {
      let { code, signal: sig } = await spawned.exited;
      // Its inner died after the start was acknowledged but before it read the job (warm.c): the command never had it.
      const handOverFailed = warm && code === 125 && stderr.end().startsWith('sbx: hand over the job');
      if (warm && (!(await warm.started) || handOverFailed) && !timedOut && !aborted) {
        // The warm sandbox ended before its command could run (killed, or its set-up failed): a cold
        // start, with fresh output (the warm attempt's set-up messages are not the command's).
        stdout = capped('stdout', 1);
        stderr = capped('stderr', 2);
        spawned = this.startCold(spec, cgroup, handlers);
        ({ code, signal: sig } = await spawned.exited);
      }
      const wallMs = Math.round(performance.now() - started);
      if (code === 125 && stderr.end().startsWith('sbx:')) {
        throw new Error(`sandbox set-up failed: ${stderr.end().trim()}`);
      }
      const stats = cgroup.stats();
      // bwrap reports a command killed by signal N as exit code 128+N, as shells do.
      let exitCode = code ?? 128 + (sig ? constants.signals[sig] : 9);
      let signal = sig ?? (exitCode > 128 && exitCode < 160 ? SIGNAL_NAMES.get(exitCode - 128) : undefined);
      if (timedOut || aborted) { signal = 'SIGKILL'; exitCode = 137; }
      return {
        exitCode,
        ...(signal ? { signal } : {}),
        timedOut,
        oomKilled: stats.oomKilled,
        aborted,
        stdout: stdout.end(),
        stderr: stderr.end(),
        truncated: stdout.truncated || stderr.truncated,
        cpuMs: stats.cpuMs,
        wallMs,
        memoryPeakBytes: stats.memoryPeakBytes,
      };
    } finally {
      if (warm) this.warm!.refill();
      clearTimeout(timer);
      spec.signal?.removeEventListener('abort', onAbort);
      if (group !== undefined) {
        this.groups.get(group.id)?.delete(cgroup);
        this.rebalance(group.id, group.cpus);
        cgroup.setWeight(1);
        cgroup.setCpuCap(limits.cpus);
      }
      // Emptying the cgroup can wait for the kernel to reap; the result need not.
      const removal = cgroup.release().catch(() => undefined).finally(() => this.removals.delete(removal));
      this.removals.add(removal);
    }
  }

  /** `sbx run` mounts the overlay in a private mount namespace and execs bwrap. */
  private startCold(spec: SandboxSpec, cgroup: Cgroup, handlers: SpawnHandlers): Spawned {
    const merged = path.join(spec.mount.chdir, spec.mount.merged);
    const mount = stacked(spec, this.points);
    const args = ['run'];
    for (const f of cgroup.joinFiles) args.push('--cgroup', f);
    args.push('--userns', USERNS_SPEC, '--nofile', String(OPEN_FILES), '--seccomp-fd', String(SECCOMP_FD), '--chdir', mount.chdir, '--lower', mount.lower, '--upper', mount.upper,
      '--work', mount.work, '--merged', mount.merged, ...overlayArgs(spec, this.points), '--', 'bwrap',
      ...bwrapArgs({ merged, ...this.commandLine(spec, false), env: spec.env, cwd: spec.cwd }));
    return spawner.start([SBX, ...args], spec.stdin, handlers);
  }
}

/** Where `sbx-user` appears inside a sandbox (its private /tmp). */
const USER_SHIM = '/tmp/.shellbase/user';

function userArgs(u: SandboxUser): string[] {
  return [USER_SHIM, String(u.uid), String(u.gid), u.groups.length ? u.groups.join(',') : '-', '--'];
}

/**
 * The sandbox's first process inside its namespaces: bwrap (which the spawned
 * `sbx run` became) forks it at once. Before its exec, `sbx` has a child of its
 * own (the one writing the user namespace maps), outside the sandbox: only
 * children of the process once it is bwrap count. (Machines' QEMU is started
 * the same way: its network namespace is found here too.)
 */
export async function innerPid(outer: Promise<number>): Promise<number> {
  const pid = await outer;
  for (let i = 0; i < 400; i++) {
    let children = '';
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'bwrap') children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
    } catch { throw new Error('the sandbox ended'); }
    if (children) return Number(children.split(' ')[0]);
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error('the sandbox did not start');
}

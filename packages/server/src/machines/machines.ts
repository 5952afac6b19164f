import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { CreateMachineRequest, Machine, MachineConsole, MachineExecRequest, MachineExecResult, MachineSnapshot, ServiceAccess } from '@shellbase/protocol';
import type { ContextAccess } from '../core/contexts.js';
import { commitMachine } from './commit.js';
import { ShellbaseError, invalid, notFound } from '../errors.js';
import { durably, type Caller, type Deps } from '../core/deps.js';
import { checkName, checkRange } from '../core/validate.js';
import { gatewayUrls, newToken } from '../util/tokens.js';
import type { E2bSandboxSpec, MachineRow, MachineSpec, SnapshotRow, VersionRow } from '../store/metadata/types.js';
import { newId } from '../util/ids.js';
import { isBareImage } from '../images/ids.js';
import type { AccelChoice } from './accel.js';
import { findAssets } from './assets.js';
import { DISK_GB, overlay } from './disk.js';
import { MachineHost } from './host.js';
import { MachineLayout, runFiles } from './layout.js';
import { readConsoleTail } from './console-log.js';
import type { PortTarget } from '../util/pipe.js';
import { MachineIo } from './io.js';
import { MachineDisks } from './storage.js';
import { admit, hostRoom } from './admission.js';
import { MachineRun, type RestoreSource } from './run.js';
import { Templates } from './templates.js';
import { checkRestorable, freezeMachine, shapeOf, toSnapshot } from './snapshots.js';
import { machineView } from './views.js';
import { Network } from '../core/network.js';
import { checkPolicy } from '../net/policy.js';
import type { BlobStore } from '../store/blobs/types.js';
import { MachinePlacement, type Reservation } from './placement.js';
import { MachineStowage } from './stowage.js';

/**
 * Machines: rows in the metadata store, one MachineRun per machine while the
 * server lives. Every machine is restored from a template or a snapshot, so
 * none boots in a caller's path; `io` runs commands and file calls in them.
 */
export class Machines {
  private host_: MachineHost | null = null;
  private opening: Promise<MachineHost> | null = null;
  private templates: Templates | null = null;
  private readonly runs = new Map<string, MachineRun>();
  readonly io: MachineIo;
  /** How long each kind of step took the last time (the bench reads the source's pause in a fork here). */
  readonly lastStep = { restore: 0, freeze: 0, hibernate: 0 };

  private readonly layout: MachineLayout;
  private readonly disks: MachineDisks;
  private readonly network: Network;
  /** Cluster mode: where machines run and how they move (machines/placement.ts); null in the embedded default. */
  private readonly place: MachinePlacement | null;

  /** `blobs`: the cluster's object store (cluster mode), where hibernated machines and snapshots are kept too. */
  constructor(private readonly deps: Deps, private readonly contexts: ContextAccess, blobs?: BlobStore) {
    this.network = new Network(deps);
    this.layout = new MachineLayout(deps.config.home, deps.config.cache);
    this.disks = new MachineDisks(deps, this.layout);
    this.io = new MachineIo((caller, id) => this.running(caller, id), deps.config);
    this.place = deps.cluster && blobs
      ? new MachinePlacement(deps.cluster, new MachineStowage(blobs, this.layout, deps.log), deps.metadata, this.layout, deps.config)
      : null;
  }

  /** Cluster mode: the API of the live worker that runs machine `id`, when that is another worker (api/machine-forward.ts). */
  async ownerApi(id: string): Promise<string | null> {
    return this.place ? ((await this.place.elsewhere(id))?.api ?? null) : null;
  }

  get clustered(): boolean { return this.place !== null; }

  /**
   * Cluster mode: tells `listener` of each machine that starts running on this worker (its lease
   * taken here: made, restored, or woken after it hibernated elsewhere). Never told in the
   * embedded default, where every machine runs here.
   */
  onTaken(listener: (id: string) => void): void { this.place?.onTaken(listener); }

  /** At start: the host is opened when the assets are built; machines a crash left running are stopped. */
  async open(): Promise<void> {
    if (findAssets(this.deps.config.cache)) await this.host();
    // In a cluster the rows are every worker's, and nothing yet says which worker runs which
    // machine: a worker's start leaves them as they are (docs/deploy.md, what is not shared yet).
    if (this.deps.cluster) return;
    for (const row of await this.deps.metadata.machines.list()) {
      if (row.state === 'hibernated' && existsSync(this.layout.hibernation(row.id).state)) continue;
      if (row.state !== 'stopped') {
        await this.deps.metadata.machines.update({ ...row, state: 'stopped' });
        this.deps.log.warn({ machine: row.id, was: row.state }, 'machine stopped: its memory did not survive the server');
      }
    }
  }

  /** The accelerator machines use (healthz), null while the machine assets are not built. */
  accel(): AccelChoice | null { return this.host_?.accel ?? null; }

  private host(): Promise<MachineHost> {
    if (this.host_) return Promise.resolve(this.host_);
    const { config, runtime, log, snapshotter: layers } = this.deps;
    const assets = findAssets(config.cache);
    if (!assets) {
      return Promise.reject(new ShellbaseError('failed_precondition', 'machine assets (kernel, initramfs) are not built on this host', {
        hint: 'run `npm run setup` (or `shellbase machine assets`) first',
      }));
    }
    this.opening ??= MachineHost.open({ home: config.home, cache: config.cache, assets, accel: config.machines.accel, budgetMb: config.machines.memoryBudgetMb, runtime,
      forward: this.deps.forwarder.installed() })
      .then((h) => { this.host_ = h; this.templates = new Templates(h, layers, log); return h; })
      .finally(() => { this.opening = null; });
    return this.opening;
  }

  /** `extra`: fields kept in its spec for another API (compat/e2b). */
  create(caller: Caller, req: CreateMachineRequest, extra: Pick<MachineSpec, 'e2b'> = {}): Promise<Machine> {
    return durably(this.deps.durability, () => this.createNow(caller, req, extra));
  }

  private async createNow(caller: Caller, req: CreateMachineRequest, extra: Pick<MachineSpec, 'e2b'>): Promise<Machine> {
    const m = this.deps.config.machines;
    const memoryMb = checkRange('memoryMb', req.memoryMb ?? m.defaultMemoryMb, 128, m.maxMemoryMb);
    const cpus = checkRange('cpus', req.cpus ?? 1, 1, m.maxCpus);
    const diskGb = checkRange('diskGb', req.diskGb ?? DISK_GB, DISK_GB, m.maxDiskGb);
    const idleTimeoutMs = checkRange('idleTimeoutMs', req.idleTimeoutMs ?? m.defaultIdleTimeoutMs, 100, 7 * 86_400_000);
    let version: VersionRow;
    let image = req.image ?? 'debian';
    if (req.context !== undefined) {
      version = await this.contexts.base(caller, checkName(req.context), req.version);
    } else {
      if (req.version !== undefined) throw invalid('version needs a context', 'pass context with version');
      version = await this.contexts.imageVersion(caller, image);
    }
    if (req.context !== undefined) image = (await this.contexts.imageOf(caller, req.context)) ?? image;
    // A request's network may only narrow what its context (or tenant) allows: 400 malformed, 403 wider.
    const network = req.network === undefined ? undefined : checkPolicy(req.network);
    if (network) await this.network.effective(caller, req.context, network);
    const lacks = await this.contexts.unbootable(version);
    if (lacks) {
      throw new ShellbaseError('failed_precondition', `${req.context !== undefined ? `context ${req.context}` : `image ${image}`} cannot boot as a machine: ${lacks}`, {
        details: { image, ...(req.context !== undefined ? { context: req.context } : {}) },
        hint: 'install systemd in it (Debian: apt-get install systemd-sysv), or use queries (exec), which need no init',
      });
    }
    const host = await this.host();
    // An image's tree (a context never written to included) is everyone's: its template is in the cache.
    const shared = isBareImage(version.layers);
    if (!shared) host.tenantDir(caller.tenantId);
    const root = this.layout.templatesDir(shared ? null : caller.tenantId);
    const built = (e: Error): never => { throw new ShellbaseError('unavailable', e.message, { hint: 'the server log has the details; the next create tries again' }); };
    const slots = await this.admit(caller, memoryMb, 1);
    const run = await this.templates!.use({ root, layers: version.layers, memoryMb, cpus }, async (tpl) => {
      const id = newId('m');
      host.disksDir(caller.tenantId);
      const disk = this.layout.diskFile(caller.tenantId, `${id}-${newId('d')}`);
      await overlay(tpl.disk, disk);
      const row: MachineRow = {
        id, tenantId: caller.tenantId, state: 'starting', createdAt: new Date().toISOString(),
        spec: {
          format: 2, image, ...(req.context !== undefined ? { context: req.context, version: version.id } : {}), memoryMb, cpus,
          diskGb: DISK_GB, idleTimeoutMs, ...(network ? { network } : {}), disk: [disk, tpl.disk], ports: [], ...extra,
        },
      };
      return this.start(row, { ram: tpl.ram, state: tpl.state, readable: [tpl.dir] }, slots);
    }, built).finally(() => slots?.done());
    // Templates' disks are DISK_GB: a larger one grows before the create returns (a failure deletes the machine).
    if (diskGb > DISK_GB) await this.grow(run, diskGb).catch(async (e: unknown) => { await run.serial(() => this.discard(run)); throw e; });
    return this.toMachine(run);
  }

  /**
   * Garbage collection of templates of tenants' versions (machines/templates.ts, `collect`): those
   * no machine or snapshot stands on, unused for `templateIdleMs`. Images' templates live in the
   * cache, which other servers on the host may share: they stay.
   */
  async collectTemplates(): Promise<number> {
    if (!this.templates) return 0;
    const files = await this.disks.chainFiles();
    const inUse = new Set([...files].map((f) => path.dirname(f)));
    // In a cluster, also the frozen disk files this worker fetched that no chain names any more, and
    // what it kept of machines and snapshots that moved on or went.
    const fetched = this.place ? this.place.stowage.collect(files, this.deps.config.machines.templateIdleMs) + await this.disks.collectStray(this.deps.config.machines.templateIdleMs) : 0;
    let names: string[] = [];
    try { names = readdirSync(this.layout.tenantsDir); } catch { return fetched; }
    return fetched + await this.templates.collect(names.map((t) => this.layout.templatesDir(t)), inUse, this.deps.config.machines.templateIdleMs);
  }

  /** Inserts the row and restores the machine (on this worker, with one of `slots`); on failure nothing of it is left. */
  private async start(row: MachineRow, src: RestoreSource, slots: Reservation | null): Promise<MachineRun> {
    await this.place?.take(row.id);
    slots?.bind(row.id);
    await this.deps.metadata.machines.create(row);
    const run = this.runOf(row);
    try {
      await run.serial(() => run.restore(src));
    } catch (e) {
      await this.discard(run);
      if (e instanceof ShellbaseError) throw e;
      throw new ShellbaseError('unavailable', `machine ${row.id} did not start: ${(e as Error).message}`, { hint: 'try again; if it persists, the server log has the reason' });
    }
    return run;
  }

  private async discard(run: MachineRun): Promise<void> {
    await run.destroy();
    this.runs.delete(run.row.id);
    await this.deps.metadata.machines.delete(run.row.tenantId, run.row.id);
    await this.place?.forget(run.row.id);
    await this.place?.dropped(run.row.id);
    await this.disks.collect(run.row.tenantId, run.row.spec.disk);
  }

  /**
   * Refuses a start that would pass the tenant's quota, the host's cap or its memory budget; in a
   * cluster, also takes the slots of the quota counted over every worker (given back by `done`
   * unless a machine took them).
   */
  private async admit(caller: Pick<Caller, 'tenantId' | 'quotas'>, memoryMb: number, count: number): Promise<Reservation | null> {
    admit(this.deps.config, this.localRuns(), caller, memoryMb, count);
    return this.place ? this.place.reserve(caller, count) : null;
  }

  private runOf(row: MachineRow): MachineRun {
    let run = this.runs.get(row.id);
    if (!run) {
      run = new MachineRun(row, {
        host: this.host_!,
        save: async (r) => { await this.deps.metadata.machines.update(r); await this.place?.saved(r); },
        ...this.place?.runHooks(this.deps.log),
        meter: async (r, wallMs, cpuMs, { activeMs, bytesOut, bytesIn }) => {
          this.deps.meter.runEnded('machine', wallMs, activeMs);
          await this.deps.metadata.usage.record({
            tenantId: r.tenantId, context: r.spec.context ?? `machine:${r.id}`, kind: 'machine', createdAt: new Date().toISOString(),
            cpuMs, wallMs, activeMs, memoryPeakBytes: r.spec.memoryMb * 2 ** 20, bytesWritten: 0, exitCode: null, egressBytes: bytesOut, ingressBytes: bytesIn,
          });
        },
        // A session even for "none" (it refuses every connection): a running machine's policy may widen (setNetwork).
        egress: async (r) => this.deps.egress.open({
          tenantId: r.tenantId, context: r.spec.context ?? `machine:${r.id}`, kind: 'machine', policy: await this.network.effectiveOf(r.tenantId, r.spec.context, r.spec.network),
        }, this.host_!.uid),
        admit: (r) => hostRoom(this.deps.config.machines, this.localRuns(), r.spec.memoryMb, 1),
        step: (step, ms) => { this.lastStep[step] = ms; this.deps.meter.machineStep(step, ms); },
      });
      this.runs.set(row.id, run);
    }
    return run;
  }

  /** The machines this server runs (in a cluster, not those it only looked at for another worker). */
  private localRuns(): MachineRun[] {
    return [...this.runs.values()].filter((r) => !this.place || this.place.holds(r.row.id));
  }

  /** Its row as this server knows it: the running process's, or (in a cluster, of a machine another worker may have moved) the store's. */
  private current(row: MachineRow): MachineRow {
    const run = this.runs.get(row.id);
    return run && (!this.place || this.place.holds(row.id)) ? run.row : row;
  }

  private async row(caller: Caller, id: string): Promise<MachineRow> {
    if (typeof id !== 'string' || !/^m_[a-z0-9]{1,64}$/.test(id)) throw notFound('machine', String(id));
    const local = this.runs.get(id);
    const row = local && (!this.place || this.place.holds(id)) ? local.row : await this.deps.metadata.machines.get(caller.tenantId, id);
    if (!row || row.tenantId !== caller.tenantId) throw notFound('machine', id);
    return row;
  }

  /** `readOnly`: in a cluster, a machine another worker runs is shown as its row says (else `unavailable` here). */
  private async runFor(caller: Caller, id: string, readOnly = false): Promise<MachineRun> {
    const row = await this.row(caller, id);
    await this.host();
    const run = this.runOf(row);
    await this.place?.settle(run, { readOnly });
    return run;
  }

  /** A machine that runs (woken from hibernation if need be), counted as used until `release`. */
  private async running(caller: Caller, id: string): Promise<{ run: MachineRun; release: () => void }> {
    const run = await this.runFor(caller, id);
    const release = await run.acquire();
    return { run, release };
  }

  async get(caller: Caller, id: string): Promise<Machine> { return this.toMachine(await this.runFor(caller, id, true)); }

  async list(caller: Caller): Promise<Machine[]> {
    return (await this.deps.metadata.machines.list(caller.tenantId)).map((r) => this.toMachine(this.current(r)));
  }

  async pause(caller: Caller, id: string): Promise<Machine> { return this.step(caller, id, (r) => r.pause()); }
  /** Memory to disk and QEMU ended now, as after idleTimeoutMs; the next use restores it. */
  async hibernate(caller: Caller, id: string): Promise<Machine> { return this.step(caller, id, (r) => r.hibernate()); }
  async resume(caller: Caller, id: string): Promise<Machine> { return this.step(caller, id, (r) => r.resume()); }
  async stop(caller: Caller, id: string): Promise<Machine> { return this.step(caller, id, (r) => r.stop()); }

  /**
   * The last `lines` lines of its serial console as this worker has it (the machine is not woken).
   * In a cluster a call reaches the worker that runs the machine (api/machine-forward.ts).
   */
  async consoleTail(caller: Caller, id: string, lines: number): Promise<MachineConsole> {
    await this.row(caller, id);
    return readConsoleTail(runFiles(this.layout.runDir(id)).console, lines);
  }

  private step(caller: Caller, id: string, f: (r: MachineRun) => Promise<void>): Promise<Machine> {
    return durably(this.deps.durability, async () => {
      const run = await this.runFor(caller, id);
      await run.serial(() => f(run));
      return this.toMachine(run);
    });
  }

  remove(caller: Caller, id: string): Promise<void> {
    return durably(this.deps.durability, () => this.removeNow(caller, id));
  }

  private async removeNow(caller: Caller, id: string): Promise<void> {
    const run = await this.runFor(caller, id);
    await run.serial(() => this.discard(run));
  }

  /** RAM, devices and disk of a running machine at one instant, kept until deleted. */
  snapshot(caller: Caller, id: string): Promise<MachineSnapshot> {
    return durably(this.deps.durability, () => this.snapshotNow(caller, id));
  }

  private async snapshotNow(caller: Caller, id: string): Promise<MachineSnapshot> {
    const run = await this.runFor(caller, id);
    if (run.state === 'hibernated') await run.acquire().then((release) => release());
    const snap = await this.freeze(caller, run, false);
    return toSnapshot(snap);
  }

  private async freeze(caller: Caller, run: MachineRun, temporary: boolean): Promise<SnapshotRow> {
    const row = await freezeMachine(await this.host(), caller.tenantId, run, temporary);
    if (temporary) return row;
    await this.place?.storeSnapshot(row);
    await this.deps.metadata.machines.createSnapshot(row).catch(async (e: unknown) => { await this.place?.dropped(row.id); throw e; });
    return row;
  }

  /** N machines from a snapshot, each with its own disk overlay, RAM copy and port URLs. */
  restore(caller: Caller, snapshotId: string, count = 1): Promise<Machine[]> {
    return durably(this.deps.durability, () => this.restoreNow(caller, snapshotId, count));
  }

  private async restoreNow(caller: Caller, snapshotId: string, count = 1): Promise<Machine[]> {
    if (typeof snapshotId !== 'string' || !/^s_[a-z0-9]{1,64}$/.test(snapshotId)) throw notFound('snapshot', String(snapshotId));
    const snap = await this.deps.metadata.machines.getSnapshot(caller.tenantId, snapshotId);
    if (!snap) throw notFound('snapshot', snapshotId);
    return (await this.spawnFrom(caller, snap, count)).map((r) => this.toMachine(r));
  }

  /** N copies of a running machine with its memory, processes and disk at one instant; it keeps running. */
  fork(caller: Caller, id: string, count = 1): Promise<Machine[]> {
    return durably(this.deps.durability, () => this.forkNow(caller, id, count));
  }

  private async forkNow(caller: Caller, id: string, count = 1): Promise<Machine[]> {
    const run = await this.runFor(caller, id);
    this.checkCount(count);
    // Refused before the source pauses (spawnFrom takes the slots).
    await (await this.admit(caller, run.row.spec.memoryMb, count))?.done();
    if (run.state === 'hibernated') await run.acquire().then((release) => release());
    const snap = await this.freeze(caller, run, true);
    try {
      return (await this.spawnFrom(caller, snap, count, true)).map((r) => this.toMachine(r));
    } finally {
      rmSync(snap.spec.ram, { force: true });
      rmSync(path.dirname(snap.spec.state), { recursive: true, force: true });
    }
  }

  private checkCount(count: number): void {
    checkRange('count', count, 1, this.deps.config.machines.maxFork);
  }

  /** `temporary`: the snapshot is a fork's, and its RAM file goes to the last copy. */
  private async spawnFrom(caller: Caller, snap: SnapshotRow, count: number, temporary = false): Promise<MachineRun[]> {
    this.checkCount(count);
    const host = await this.host();
    if (this.place && !temporary) snap = await this.place.localSnapshot(snap);
    const s = snap.spec;
    await checkRestorable(host, snap);
    const slots = await this.admit(caller, s.memoryMb, count);
    const out: MachineRun[] = [];
    try {
      for (let i = 0; i < count; i++) {
        const id = newId('m');
        host.disksDir(caller.tenantId);
        const disk = this.layout.diskFile(caller.tenantId, `${id}-${newId('d')}`);
        await overlay(s.disk[0], disk);
        const row: MachineRow = {
          id, tenantId: caller.tenantId, state: 'starting', createdAt: new Date().toISOString(),
          spec: { ...shapeOf(s), snapshot: snap.id, disk: [disk, ...s.disk], ports: s.ports.map((port) => ({ port, token: newToken(), ...(s.keyPorts?.includes(port) ? { access: 'key' as const } : {}) })) },
        };
        out.push(await this.start(row, { ram: s.ram, state: s.state, readable: [path.dirname(s.state)], takeRam: temporary && i === count - 1 }, slots));
      }
    } catch (e) {
      for (const r of out) await this.discard(r);
      throw e;
    } finally {
      await slots?.done();
    }
    return out;
  }

  deleteSnapshot(caller: Caller, id: string): Promise<void> {
    return durably(this.deps.durability, () => this.deleteSnapshotNow(caller, id));
  }

  private async deleteSnapshotNow(caller: Caller, id: string): Promise<void> {
    const snap = typeof id === 'string' && /^s_[a-z0-9]{1,64}$/.test(id) ? await this.deps.metadata.machines.getSnapshot(caller.tenantId, id) : null;
    if (!snap) throw notFound('snapshot', String(id));
    await this.deps.metadata.machines.deleteSnapshot(caller.tenantId, id);
    await this.place?.dropped(id);
    // In a cluster, only this worker's copy of its files (the taker's stay with the taker).
    rmSync(this.place ? this.layout.snapshotDir(caller.tenantId, id) : path.dirname(snap.spec.state), { recursive: true, force: true });
    await this.disks.collect(caller.tenantId, snap.spec.disk);
  }

  async listSnapshots(caller: Caller): Promise<MachineSnapshot[]> {
    return (await this.deps.metadata.machines.listSnapshots(caller.tenantId)).map((s) => toSnapshot(s));
  }

  /**
   * Exposes a guest port on a gateway URL (kept by forks, which get URLs of their own). `access`
   * (default: as it is, else "url") says whether the gateway also wants the tenant's API key.
   */
  expose(caller: Caller, id: string, port: number, access?: ServiceAccess): Promise<{ url: string; pathUrl: string; access: ServiceAccess }> {
    return durably(this.deps.durability, () => this.exposeNow(caller, id, port, access));
  }

  private async exposeNow(caller: Caller, id: string, port: number, access?: ServiceAccess): Promise<{ url: string; pathUrl: string; access: ServiceAccess }> {
    if (access !== undefined && access !== 'url' && access !== 'key') throw invalid(`access must be "url" or "key", not ${JSON.stringify(access)}`);
    checkRange('port', port, 1, 65535);
    if (port === this.host_?.agentPort) throw invalid(`port ${port} is the guest agent's`, 'expose another port');
    const run = await this.runFor(caller, id);
    return run.serial(async () => {
      const spec = run.row.spec;
      let entry = spec.ports.find((p) => p.port === port);
      const keyed = (access ?? (entry?.access ?? 'url')) === 'key';
      if (!entry) {
        entry = { port, token: newToken(), ...(keyed ? { access: 'key' as const } : {}) };
        if (run.vm) { await run.vm.forward(port); await run.vm.bridge(run.portSocket(port), port); }
        run.row = { ...run.row, spec: { ...spec, ports: [...spec.ports, entry] } };
        await this.deps.metadata.machines.update(run.row);
      } else if ((entry.access === 'key') !== keyed) {
        const { access: _old, ...bare } = entry;
        entry = keyed ? { ...bare, access: 'key' } : bare;
        const changed = entry;
        run.row = { ...run.row, spec: { ...spec, ports: spec.ports.map((p) => (p.port === port ? changed : p)) } };
        await this.deps.metadata.machines.update(run.row);
      }
      return { ...this.urls(entry.token), access: keyed ? 'key' : 'url' };
    });
  }

  /** A guest port as the gateway reaches it, exposed first if it was not. */
  async portTarget(caller: Caller, id: string, port: number): Promise<PortTarget> {
    await this.expose(caller, id, port);
    return this.io.portTarget(await this.runFor(caller, id), port);
  }

  /** Machines' rows as they are now (of one tenant, or all), for APIs that keep fields in them (compat/e2b). */
  async rows(tenantId?: string): Promise<MachineRow[]> {
    return (await this.deps.metadata.machines.list(tenantId)).map((r) => this.current(r));
  }

  async rowOf(caller: Caller, id: string): Promise<MachineRow> { return this.row(caller, id); }

  /** Sets (or, undefined, drops) the E2B-compatible API's record of a machine. */
  setE2b(caller: Caller, id: string, e2b: E2bSandboxSpec | undefined): Promise<void> {
    return durably(this.deps.durability, async () => {
      const run = await this.runFor(caller, id);
      await run.serial(async () => {
        const { e2b: _old, ...spec } = run.row.spec;
        run.row = { ...run.row, spec: e2b ? { ...spec, e2b } : spec };
        await this.deps.metadata.machines.update(run.row);
      });
    });
  }

  /** The gateway's view of an exposed port; null for tokens no machine has. */
  async byPortToken(token: string): Promise<PortTarget | null> {
    const found = await this.deps.metadata.machines.byPortToken(token);
    if (!found) return null;
    await this.host();
    const run = this.runOf(this.current(found.machine));
    const place = this.place;
    if (!place) return this.io.portTarget(run, found.port);
    // In a cluster, the gateway passes it to the worker that runs it; a machine no live worker runs is brought up to date (or found lost) here.
    await place.settle(run, { readOnly: true });
    return this.io.portTarget(run, found.port, () => place.elsewhere(found.machine.id));
  }

  private urls(token: string): { url: string; pathUrl: string } {
    return gatewayUrls(this.deps.config.gatewayPort, token);
  }

  /** Server shutdown: running and paused machines hibernate (their memory goes to disk), then the RAM directory goes. */
  async close(): Promise<void> {
    await Promise.all(this.localRuns().map((r) => r.serial(async () => {
      if (r.state === 'paused') await r.resume();
      if (r.state === 'running') await r.hibernate();
    }).catch(async (err) => { this.deps.log.error({ err, machine: r.row.id }, 'hibernating at shutdown failed'); await r.destroy(); })));
    await this.host_?.close();
  }

  private toMachine(r: MachineRun | MachineRow): Machine {
    return machineView(r instanceof MachineRun ? r.row : r, this.deps.config.gatewayPort);
  }


  /** The machine's disk (its changes since its template) as a new version of `context`. */
  async commit(caller: Caller, id: string, context: string): Promise<{ version: string }> {
    checkName(context);
    const run = await this.runFor(caller, id);
    const release = await run.acquire();
    try {
      return { version: await commitMachine(caller, run, context, this.contexts.exec) };
    } finally {
      release();
    }
  }

  /** Bytes a tenant's machines hold on disk: disks, snapshots, templates of its versions, hibernated memory. */
  storedBytes(tenantId: string): Promise<number> { return this.disks.storedBytes(tenantId); }

  /**
   * Grows a machine's disk to `diskGb` and its root file system with it, online (a hibernated
   * machine is woken first). Disks never shrink; asking for the size it has changes nothing.
   */
  resizeDisk(caller: Caller, id: string, diskGb: number): Promise<Machine> {
    return durably(this.deps.durability, async () => {
      checkRange('diskGb', diskGb, DISK_GB, this.deps.config.machines.maxDiskGb);
      const run = await this.runFor(caller, id);
      const has = run.row.spec.diskGb;
      if (diskGb < has) {
        throw invalid(`machine ${id}'s disk is ${has} GiB: disks grow, never shrink`, `pass diskGb between ${has} and ${this.deps.config.machines.maxDiskGb}`, { machine: id, diskGb: has });
      }
      if (diskGb > has) await this.grow(run, diskGb);
      return this.toMachine(run);
    });
  }

  private async grow(run: MachineRun, diskGb: number): Promise<void> {
    const release = await run.acquire();
    try {
      await run.serial(() => run.growDisk(diskGb));
    } finally {
      release();
    }
  }

  /**
   * Sets (or with null drops) a machine's own narrowing of its context's egress policy: kept in
   * its spec for its next starts and forks, and followed by its running QEMU's new connections.
   */
  setNetwork(caller: Caller, id: string, raw: unknown): Promise<Machine> {
    return durably(this.deps.durability, async () => {
      const row = await this.row(caller, id);
      const network = raw === null ? undefined : checkPolicy(raw);
      if (network) await this.network.effective(caller, row.spec.context, network);
      const policy = await this.network.effectiveOf(row.tenantId, row.spec.context, network);
      const apply = async (current: MachineRow): Promise<MachineRow> => {
        const { network: _old, ...rest } = current.spec;
        const next = { ...current, spec: { ...rest, ...(network ? { network } : {}) } };
        await this.deps.metadata.machines.update(next);
        return next;
      };
      const run = this.runs.get(id);
      if (!run) return this.toMachine(await apply(row));
      // After any lifecycle step in progress (a wake opens its session from the row it then has).
      return run.serial(async () => {
        run.row = await apply(run.row);
        run.setEgressPolicy(policy);
        return this.toMachine(run);
      });
    });
  }

  /** Runs a command in a machine (woken if hibernated). */
  exec(caller: Caller, id: string, req: MachineExecRequest, hooks: { signal?: AbortSignal; onOutput?: (s: 'stdout' | 'stderr', d: string) => void } = {}): Promise<MachineExecResult> {
    return this.io.exec(caller, id, req, hooks);
  }
}

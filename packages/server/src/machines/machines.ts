import type { MachineBackups } from '../core/backups.js';
import { machineBackups } from './backup.js';
import { rmSync } from 'node:fs';
import path from 'node:path';
import type { CreateMachineRequest, Machine, MachineConsole, MachineExecRequest, MachineExecResult, MachineSnapshot, ServiceAccess } from '@shellbase/protocol';
import { commitMachine } from './storage/commit.js';
import { ShellbaseError, invalid, notFound } from '../errors.js';
import { durably, type Caller, type Deps } from '../core/deps.js';
import type { ContextAccess } from '../core/contexts.js';
import type { BlobStore } from '../store/blobs/types.js';
import type { MachineIo } from './io.js';
import { checkName, checkRange } from '../core/validate.js';
import { gatewayUrls, newToken } from '../util/tokens.js';
import type { MachineRow, SnapshotRow, VersionRow } from '../store/metadata/types.js';
import { newId } from '../util/ids.js';
import { isBareImage } from '../store/layer-ids.js';
import { DISK_GB } from './storage/disk.js';
import type { VmBackend } from './vm/types.js';
import type { PortTarget } from '../util/pipe.js';
import { MachineRun, type RestoreSource } from './run.js';
import type { MachineHost } from './host.js';
import type { Reservation } from './placement.js';
import { templateSource } from './pool/restore.js';
import { withExtensions } from './extensions.js';
import { quotasOf } from '../core/quotas.js';
import { checkRestorable, freezeMachine, shapeOf, toSnapshot } from './storage/snapshots.js';
import { checkPolicy } from '../net/policy.js';
import { MachineRuns } from './runs.js';
import { MachineMounts } from './mounts.js';
import { imageMachineDefaults } from '../images/index.js';

/**
 * Machines: made from a template or a snapshot (none boots in a caller's path), forked, snapshotted
 * and restored, their ports, network, disk and records changed, their disks committed as versions;
 * `io` runs commands and file calls in them. One service composed of parts: its runs and their
 * lifecycle (runs.ts, with the host and the pool), the VM (vm/), storage (storage/).
 */
export class Machines {
  /** The machines' runs and their lifecycle steps: every operation here goes through them. */
  private readonly runs: MachineRuns;
  private readonly mounts: MachineMounts;

  /**
   * `blobs`: the cluster's object store (cluster mode), where hibernated machines and snapshots
   * are kept too. `backend`: the VM backend (machines/vm/types.ts); absent: QEMU on this host.
   */
  constructor(private readonly deps: Deps, private readonly contexts: ContextAccess, blobs?: BlobStore, backend?: VmBackend) {
    this.runs = new MachineRuns(deps, contexts, blobs, backend);
    this.mounts = new MachineMounts(deps, contexts, path.join(deps.config.home, 'tmp', 'machine-mounts'));
    // An idle machine's writable mounts commit before it hibernates, as an asked-for hibernation's do.
    this.runs.beforeIdle = async (row) => {
      if (!(row.spec.mounts ?? []).some((m) => !m.readOnly)) return;
      const run = this.runs.active.get(row.id);
      if (!run || run.state !== 'running') return;
      const caller = await contexts.callerFor(row.tenantId);
      try {
        await this.commitMounts(caller, run);
      } catch (err) {
        deps.log.warn({ err, machine: row.id }, 'committing an idle machine\'s mounts failed');
      } finally {
        caller.hold.release();
      }
    };
  }

  /** What a server backup takes of machines (their files, each under its lifecycle lock). */
  backups(): MachineBackups { return machineBackups(this.runs, this.deps); }
  /** Runs commands and file calls in machines (their own users: a machine in use does not hibernate). */
  get io(): MachineIo { return this.runs.io; }
  /** How long each kind of step took the last time (the bench reads the source's pause in a fork here). */
  get lastStep(): MachineRuns['lastStep'] { return this.runs.lastStep; }
  /** How the last freeze copied its machine. */
  get lastCopy(): MachineRuns['lastCopy'] { return this.runs.lastCopy; }
  set lastCopy(how: MachineRuns['lastCopy']) { this.runs.lastCopy = how; }
  /** What a stopped copy of a running machine's memory costs here. */
  get copyRate(): MachineRuns['copyRate'] { return this.runs.copyRate; }
  /** Creates that took a ready VM and that found none; ready VMs waiting now (tests and the bench read them). */
  get readyStats(): MachineRuns['readyStats'] { return this.runs.readyStats; }
  get clustered(): boolean { return this.runs.clustered; }
  /** At start: what a crash left goes; machines a crash left running are stopped (runs.ts). */
  open(): Promise<void> { return this.runs.open(); }
  /** Server shutdown: running and paused machines hibernate. */
  close(): Promise<void> { return this.runs.close(); }
  /** The accelerator machines use (healthz), null while the machine assets are not built. */
  accel(): ReturnType<MachineRuns['accel']> { return this.runs.accel(); }
  collectTemplates(): Promise<number> { return this.runs.collectTemplates(); }
  /** Cluster mode: the API of the live worker that runs machine `id`, when that is another worker. */
  ownerApi(id: string): Promise<string | null> { return this.runs.ownerApi(id); }
  /** Cluster mode: `listener` hears of each machine that starts running on this worker. */
  onTaken(listener: (id: string) => void): void { this.runs.onTaken(listener); }
  get(caller: Caller, id: string): Promise<Machine> { return this.runs.get(caller, id); }
  list(caller: Caller): Promise<Machine[]> { return this.runs.list(caller); }
  pause(caller: Caller, id: string): Promise<Machine> { return this.runs.pause(caller, id); }
  /** Memory to disk now (`memory` false: dropped, the disk kept); `extensions`: changes of what another API keeps, written with the hibernated state. */
  hibernate(caller: Caller, id: string, extensions?: Record<string, unknown>, memory = true): Promise<Machine> {
    return this.mountsCommitted(caller, id, () => this.runs.hibernate(caller, id, extensions, memory));
  }
  resume(caller: Caller, id: string): Promise<Machine> { return this.runs.resume(caller, id); }
  stop(caller: Caller, id: string): Promise<Machine> { return this.mountsCommitted(caller, id, () => this.runs.stop(caller, id)); }
  consoleTail(caller: Caller, id: string, lines: number): Promise<MachineConsole> { return this.runs.consoleTail(caller, id, lines); }
  remove(caller: Caller, id: string): Promise<void> { return this.mountsCommitted(caller, id, () => this.runs.remove(caller, id)); }

  /** A writable mount's changes in the machine as a new version of its context (machines/mounts.ts). */
  commitMount(caller: Caller, id: string, at: string): Promise<{ version: string }> {
    return durably(this.deps.durability, async () => {
      const run = await this.runs.runFor(caller, id);
      const mount = (run.row.spec.mounts ?? []).find((m) => m.path === at);
      if (!mount) throw notFound('mount', at);
      if (mount.readOnly) throw invalid(`the mount at ${at} is read-only: it has nothing to commit`, 'mount it writable to commit what the machine writes there');
      return { version: (await this.commitMounts(caller, run, at))! };
    });
  }

  /** Before a machine hibernates, stops or goes: its writable mounts' changes are committed (a failure is logged, the step goes on). */
  private async mountsCommitted<T>(caller: Caller, id: string, then: () => Promise<T>): Promise<T> {
    const run = await this.runs.runFor(caller, id);
    if ((run.row.spec.mounts ?? []).some((m) => !m.readOnly) && run.state !== 'stopped' && run.state !== 'lost') {
      await this.commitMounts(caller, run).catch((err: unknown) => this.deps.log.warn({ err, machine: id }, 'committing a machine\'s mounts failed'));
    }
    return then();
  }

  /** Commits each writable mount (or the one at `only`), the machine awake meanwhile; the last version made. */
  private async commitMounts(caller: Caller, run: MachineRun, only?: string): Promise<string | undefined> {
    const release = await run.acquire();
    try {
      let version: string | undefined;
      for (const m of run.row.spec.mounts ?? []) {
        if (m.readOnly || (only !== undefined && m.path !== only)) continue;
        const next = await this.mounts.commit(caller, run.vm!, run.row.id, run.row.spec.mounts!, m.path);
        await run.serial(async () => {
          const row = { ...run.row, spec: { ...run.row.spec, mounts: next } };
          await this.runs.write(row);
          run.row = row;
        });
        version = next.find((x) => x.path === m.path)!.version;
      }
      return version;
    } finally {
      release();
    }
  }
  /** Machines' rows as they are now (of one tenant, or all), for APIs that keep extensions in them. */
  rows(tenantId?: string): Promise<MachineRow[]> { return this.runs.rows(tenantId); }
  rowOf(caller: Caller, id: string): Promise<MachineRow> { return this.runs.rowOf(caller, id); }
  /** Any tenant's machine by id, as the store has it; null when there is none. */
  find(id: string): Promise<MachineRow | null> { return this.runs.find(id); }
  /** Bytes a tenant's machines hold on disk: disks, snapshots, templates of its versions, hibernated memory. */
  storedBytes(tenantId: string): Promise<number> { return this.runs.storedBytes(tenantId); }

  /** `extensions`: what another API keeps about it (MachineSpec `extensions`; compat/e2b). */
  create(caller: Caller, req: CreateMachineRequest, extensions?: Record<string, unknown>): Promise<Machine> {
    return durably(this.deps.durability, () => this.createNow(caller, req, extensions));
  }

  private async createNow(caller: Caller, req: CreateMachineRequest, extensions: Record<string, unknown> | undefined): Promise<Machine> {
    const m = this.deps.config.machines;
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
    // An image may ask for more than the server's defaults (the desktop's session and browser do), never past its maximums.
    const wants = imageMachineDefaults(image);
    const memoryMb = checkRange('memoryMb', req.memoryMb ?? Math.min(wants.memoryMb ?? m.defaultMemoryMb, m.maxMemoryMb), 128, m.maxMemoryMb);
    const cpus = checkRange('cpus', req.cpus ?? Math.min(wants.cpus ?? 1, m.maxCpus), 1, m.maxCpus);
    const mounts = await this.mounts.resolve(caller, req.context, req.mounts);
    // A request's network may only narrow what its context (or tenant) allows: 400 malformed, 403 wider.
    const network = req.network === undefined ? undefined : checkPolicy(req.network);
    if (network) await this.runs.network.effective(caller, req.context, network);
    const lacks = await this.contexts.unbootable(version);
    if (lacks) {
      throw new ShellbaseError('failed_precondition', `${req.context !== undefined ? `context ${req.context}` : `image ${image}`} cannot boot as a machine: ${lacks}`, {
        details: { image, ...(req.context !== undefined ? { context: req.context } : {}) },
        hint: 'install systemd in it (Debian: apt-get install systemd-sysv), or use queries (exec), which need no init',
      });
    }
    const host = await this.runs.host();
    // An image's tree (a context never written to included) is everyone's: its template is in the cache.
    const shared = isBareImage(version.layers);
    if (!shared) host.tenantDir(caller.tenantId);
    const root = this.runs.layout.templatesDir(shared ? null : caller.tenantId);
    const built = (e: Error): never => { throw new ShellbaseError('unavailable', e.message, { hint: 'the server log has the details; the next create tries again' }); };
    const src = { root, layers: version.layers, memoryMb, cpus };
    // A machine restored ahead for this template (machines/pool/ready.ts) has its id and disk already;
    // taken before admission, so admission does not count it twice.
    const at = await this.runs.templates!.resolve(src);
    let ready = this.runs.ready?.take(caller.tenantId, at.dir) ?? null;
    const slots = await this.runs.admit(caller, memoryMb, 1, ready).catch((e: unknown) => { if (ready) this.runs.ready!.putBack(ready); throw e; });
    const run = await this.runs.templates!.use(src, at, async (tpl) => {
      const id = ready?.id ?? newId('m');
      const disk = ready?.disk ?? this.runs.layout.diskFile(caller.tenantId, `${id}-${newId('d')}`);
      if (!ready) {
        host.disksDir(caller.tenantId);
        await host.backend.overlay(tpl.disk, disk);
      }
      const row: MachineRow = {
        id, tenantId: caller.tenantId, state: 'starting', createdAt: new Date().toISOString(),
        spec: {
          format: tpl.ramPadKb ? 3 : 2, image, ...(req.context !== undefined ? { context: req.context, version: version.id } : {}), memoryMb, cpus,
          ...(tpl.ramPadKb ? { ramPadKb: tpl.ramPadKb } : {}), ...(Object.keys(tpl.env).length ? { guestEnv: tpl.env } : {}),
          diskGb: DISK_GB, idleTimeoutMs, ...(network ? { network } : {}), disk: [disk, tpl.disk], ports: [], ...(extensions ? { extensions } : {}),
          ...(mounts.length ? { mounts } : {}),
        },
      };
      const taken = ready;
      ready = null; // `start` owns it from here
      const started = await this.runs.start(row, taken ?? templateSource(tpl), slots);
      // The template is hot: the next create from it finds a machine ready.
      this.runs.ready?.used(caller.tenantId, tpl, memoryMb, cpus);
      return started;
    }, built).finally(() => {
      slots?.done();
      if (ready) this.runs.ready!.putBack(ready); // the template could not be had
    });
    // Templates' disks are DISK_GB: a larger one grows before the create returns (a failure deletes the machine).
    if (diskGb > DISK_GB) await this.grow(run, diskGb).catch(async (e: unknown) => { await run.serial(() => this.runs.discard(run)); throw e; });
    if (mounts.length) await this.mounts.attach(caller, run.vm!, mounts).catch(async (e: unknown) => { await run.serial(() => this.runs.discard(run)); throw e; });
    return this.runs.toMachine(run);
  }

  /** RAM, devices and disk of a running machine at one instant, kept until deleted. */
  snapshot(caller: Caller, id: string): Promise<MachineSnapshot> {
    return durably(this.deps.durability, () => this.snapshotNow(caller, id));
  }

  private async snapshotNow(caller: Caller, id: string): Promise<MachineSnapshot> {
    const run = await this.runs.runFor(caller, id);
    if (run.state === 'hibernated') await run.acquire().then((release) => release());
    const snap = await this.freeze(caller, run, false);
    return toSnapshot(snap);
  }

  private async freeze(caller: Caller, run: MachineRun, temporary: boolean): Promise<SnapshotRow> {
    const row = await freezeMachine(await this.runs.host(), caller.tenantId, run, temporary);
    if (temporary) return row;
    await this.runs.place?.storeSnapshot(row);
    await this.deps.metadata.machines.createSnapshot(row).catch(async (e: unknown) => { await this.runs.place?.dropped(row.id); throw e; });
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
    return (await this.spawnFrom(caller, snap, count)).map((r) => this.runs.toMachine(r));
  }

  /** N copies of a running machine with its memory, processes and disk at one instant; it keeps running. */
  fork(caller: Caller, id: string, count = 1): Promise<Machine[]> {
    return durably(this.deps.durability, () => this.forkNow(caller, id, count));
  }

  private async forkNow(caller: Caller, id: string, count = 1): Promise<Machine[]> {
    const run = await this.runs.runFor(caller, id);
    this.checkCount(count);
    // Refused before the source pauses (spawnFrom takes the slots).
    await (await this.runs.admit(caller, run.row.spec.memoryMb, count))?.done();
    if (run.state === 'hibernated') await run.acquire().then((release) => release());
    const snap = await this.freeze(caller, run, true);
    try {
      return (await this.spawnFrom(caller, snap, count, true)).map((r) => this.runs.toMachine(r));
    } finally {
      rmSync(snap.spec.ram, { force: true });
      rmSync(path.dirname(snap.spec.state), { recursive: true, force: true });
    }
  }

  private checkCount(count: number): void {
    checkRange('count', count, 1, this.deps.config.machines.maxFork);
  }

  /**
   * Starts `count` machines from `snap` at once. `temporary`: the snapshot is a fork's, and its
   * RAM file goes to the last copy once the others copied it. All start or none is left.
   */
  private async spawnFrom(caller: Caller, snap: SnapshotRow, count: number, temporary = false): Promise<MachineRun[]> {
    this.checkCount(count);
    const host = await this.runs.host();
    if (this.runs.place && !temporary) snap = await this.runs.place.localSnapshot(snap);
    const s = snap.spec;
    checkRestorable(host, snap);
    const slots = await this.runs.admit(caller, s.memoryMb, count);
    const copied: (() => void)[] = [];
    const takeAfter = Promise.all(Array.from({ length: count - 1 }, () => new Promise<void>((resolve) => copied.push(resolve))));
    const starts = Array.from({ length: count }, (_, i) => {
      const last = i === count - 1;
      const from: RestoreSource = last
        ? { ram: s.ram, state: s.state, ...(temporary ? { takeRam: true, takeAfter } : {}) }
        : { ram: s.ram, state: s.state, ramCopied: copied[i] };
      const started = this.spawnOne(caller, host, snap, from, slots);
      if (!last) started.then(copied[i], copied[i]);
      return started;
    });
    const results = await Promise.allSettled(starts);
    await slots?.done();
    const failure = results.find((r) => r.status === 'rejected');
    const out = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    if (failure) {
      for (const r of out) await this.runs.discard(r);
      throw failure.reason;
    }
    return out;
  }

  /** One machine of `snap`: its own disk over the snapshot's, started from `from`. */
  private async spawnOne(caller: Caller, host: MachineHost, snap: SnapshotRow, from: RestoreSource, slots: Reservation | null): Promise<MachineRun> {
    const s = snap.spec;
    const id = newId('m');
    host.disksDir(caller.tenantId);
    const disk = this.runs.layout.diskFile(caller.tenantId, `${id}-${newId('d')}`);
    await host.backend.overlay(s.disk[0], disk);
    const row: MachineRow = {
      id, tenantId: caller.tenantId, state: 'starting', createdAt: new Date().toISOString(),
      spec: { ...shapeOf(s), snapshot: snap.id, disk: [disk, ...s.disk], ports: s.ports.map((port) => ({ port, token: newToken(), ...(s.keyPorts?.includes(port) ? { access: 'key' as const } : {}) })) },
    };
    return await this.runs.start(row, from, slots);
  }

  deleteSnapshot(caller: Caller, id: string): Promise<void> {
    return durably(this.deps.durability, () => this.deleteSnapshotNow(caller, id));
  }

  private async deleteSnapshotNow(caller: Caller, id: string): Promise<void> {
    const snap = typeof id === 'string' && /^s_[a-z0-9]{1,64}$/.test(id) ? await this.deps.metadata.machines.getSnapshot(caller.tenantId, id) : null;
    if (!snap) throw notFound('snapshot', String(id));
    await this.deps.metadata.machines.deleteSnapshot(caller.tenantId, id);
    await this.runs.place?.dropped(id);
    // In a cluster, only this worker's copy of its files (the taker's stay with the taker).
    rmSync(this.runs.place ? this.runs.layout.snapshotDir(caller.tenantId, id) : path.dirname(snap.spec.state), { recursive: true, force: true });
    await this.runs.disks.collect(caller.tenantId, snap.spec.disk);
  }

  async listSnapshots(caller: Caller): Promise<MachineSnapshot[]> {
    return (await this.deps.metadata.machines.listSnapshots(caller.tenantId)).map((s) => toSnapshot(s));
  }

  /**
   * Exposes a guest port on a gateway URL (kept by forks, which get URLs of their own). `access`
   * (default: as it is, else "url") says whether the gateway also wants the tenant's API key.
   */
  expose(caller: Caller, id: string, port: number, access?: ServiceAccess): Promise<{ url: string; pathUrl: string; access: ServiceAccess }> {
    return durably(this.deps.durability, async () => this.exposeOn(await this.checkedRun(caller, id, port, access), port, access));
  }

  /** The machine's run, once the port (and the access asked for) are found good. */
  private checkedRun(caller: Caller, id: string, port: number, access?: ServiceAccess): Promise<MachineRun> {
    if (access !== undefined && access !== 'url' && access !== 'key') throw invalid(`access must be "url" or "key", not ${JSON.stringify(access)}`);
    checkRange('port', port, 1, 65535);
    if (this.runs.host_?.backend.reservedPorts.includes(port)) throw invalid(`port ${port} is the guest agent's`, 'expose another port');
    return this.runs.runFor(caller, id);
  }

  /** `access`: the port's from now (undefined: as it is); `fresh`: a port not exposed yet gets that. */
  private exposeOn(run: MachineRun, port: number, access?: ServiceAccess, fresh: ServiceAccess = 'url'): Promise<{ url: string; pathUrl: string; access: ServiceAccess }> {
    return run.serial(async () => {
      const spec = run.row.spec;
      let entry = spec.ports.find((p) => p.port === port);
      const keyed = (access ?? (entry ? (entry.access ?? 'url') : fresh)) === 'key';
      if (!entry) {
        entry = { port, token: newToken(), ...(keyed ? { access: 'key' as const } : {}) };
        if (run.vm) await run.vm.expose(port, run.portSocket(port));
        run.row = { ...run.row, spec: { ...spec, ports: [...spec.ports, entry] } };
        await this.runs.write(run.row);
      } else if ((entry.access === 'key') !== keyed) {
        const { access: _old, ...bare } = entry;
        entry = keyed ? { ...bare, access: 'key' } : bare;
        const changed = entry;
        run.row = { ...run.row, spec: { ...spec, ports: spec.ports.map((p) => (p.port === port ? changed : p)) } };
        await this.runs.write(run.row);
      }
      return { ...this.urls(entry.token), access: keyed ? 'key' : 'url' };
    });
  }

  /** A guest port as the gateway reaches it, exposed first if it was not (then with `fresh` access). */
  async portTarget(caller: Caller, id: string, port: number, fresh: ServiceAccess = 'url'): Promise<PortTarget> {
    const run = await this.checkedRun(caller, id, port, fresh);
    await durably(this.deps.durability, () => this.exposeOn(run, port, undefined, fresh));
    return this.runs.io.portTarget(run, port);
  }

  /** Sets (or, undefined, drops) what another API keeps about a machine under `name` (MachineSpec `extensions`). */
  setExtension(caller: Caller, id: string, name: string, value: unknown): Promise<void> {
    return durably(this.deps.durability, async () => {
      const run = await this.runs.runFor(caller, id);
      await run.serial(async () => {
        run.row = { ...run.row, spec: withExtensions(run.row.spec, { [name]: value }) };
        await this.runs.write(run.row);
      });
    });
  }

  /** The gateway's view of an exposed port; null for tokens no machine has. */
  async byPortToken(token: string): Promise<PortTarget | null> {
    const found = await this.deps.metadata.machines.byPortToken(token);
    if (!found) return null;
    await this.runs.host();
    const run = this.runs.runOf(this.runs.current(found.machine));
    const place = this.runs.place;
    if (!place) return this.runs.io.portTarget(run, found.port);
    // In a cluster, the gateway passes it to the worker that runs it; a machine no live worker runs is brought up to date (or found lost) here.
    await place.settle(run, { readOnly: true });
    return this.runs.io.portTarget(run, found.port, () => place.elsewhere(found.machine.id));
  }

  private urls(token: string): { url: string; pathUrl: string } {
    return gatewayUrls(this.deps.config.gatewayPort, token);
  }

  /** The machine's disk (its changes since its template) as a new version of `context`. */
  async commit(caller: Caller, id: string, context: string): Promise<{ version: string }> {
    checkName(context);
    const run = await this.runs.runFor(caller, id);
    const release = await run.acquire();
    try {
      // Ten minutes to apply the changes, or the tenant's most when that is less.
      const timeoutMs = Math.min(600_000, quotasOf(this.deps.config, caller).maximums.timeoutMs);
      if ((run.row.spec.mounts ?? []).some((m) => !m.readOnly)) await this.commitMounts(caller, run);
      return { version: await commitMachine(caller, run, context, this.contexts.exec, timeoutMs) };
    } finally {
      release();
    }
  }

  /**
   * Grows a machine's disk to `diskGb` and its root file system with it, online (a hibernated
   * machine is woken first). Disks never shrink; asking for the size it has changes nothing.
   */
  resizeDisk(caller: Caller, id: string, diskGb: number): Promise<Machine> {
    return durably(this.deps.durability, async () => {
      checkRange('diskGb', diskGb, DISK_GB, this.deps.config.machines.maxDiskGb);
      const run = await this.runs.runFor(caller, id);
      const has = run.row.spec.diskGb;
      if (diskGb < has) {
        throw invalid(`machine ${id}'s disk is ${has} GiB: disks grow, never shrink`, `pass diskGb between ${has} and ${this.deps.config.machines.maxDiskGb}`, { machine: id, diskGb: has });
      }
      if (diskGb > has) await this.grow(run, diskGb);
      return this.runs.toMachine(run);
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
      const row = await this.runs.row(caller, id);
      const network = raw === null ? undefined : checkPolicy(raw);
      if (network) await this.runs.network.effective(caller, row.spec.context, network);
      const policy = await this.runs.network.effectiveOf(row.tenantId, row.spec.context, network);
      const apply = async (current: MachineRow): Promise<MachineRow> => {
        const { network: _old, ...rest } = current.spec;
        const next = { ...current, spec: { ...rest, ...(network ? { network } : {}) } };
        await this.runs.write(next);
        return next;
      };
      const run = this.runs.active.get(id);
      if (!run) return this.runs.toMachine(await apply(row));
      // In a cluster, from the store's row, not this worker's copy (another worker may have moved
      // it on since); `unavailable` while another worker runs it (the API passes calls there).
      await this.runs.place?.settle(run);
      // After any lifecycle step in progress (a wake opens its session from the row it then has).
      return run.serial(async () => {
        run.row = await apply(run.row);
        run.setEgressPolicy(policy);
        return this.runs.toMachine(run);
      });
    });
  }

  /** Runs a command in a machine (woken if hibernated). */
  exec(caller: Caller, id: string, req: MachineExecRequest, hooks: { signal?: AbortSignal; onOutput?: (s: 'stdout' | 'stderr', d: string) => void } = {}): Promise<MachineExecResult> {
    return this.runs.io.exec(caller, id, req, hooks);
  }
}

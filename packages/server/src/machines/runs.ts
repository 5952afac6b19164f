import { existsSync, readdirSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { Machine, MachineConsole } from '@shellbase/protocol';
import type { ContextAccess } from '../core/contexts.js';
import { ShellbaseError, notFound } from '../errors.js';
import { durably, type Caller, type Deps } from '../core/deps.js';
import type { LeaseFence, MachineRow } from '../store/metadata/types.js';
import { MachineHost } from './host.js';
import { MachineLayout, runFiles } from './layout.js';
import { readConsoleTail } from './vm/console-log.js';
import { MachineIo } from './io.js';
import { MachineDisks } from './storage/storage.js';
import { hostRoom, tenantRoom, type Held } from './admission.js';
import { MachineRun, type RestoreSource } from './run.js';
import { templateSource } from './pool/restore.js';
import { withExtensions } from './extensions.js';
import { copiesLive, CopyRate } from './vm/live-copy.js';
import { QemuBackend } from './vm/qemu-backend.js';
import type { VmBackend } from './vm/types.js';
import { Templates } from './pool/templates.js';
import { ReadyPool, type ReadyVm } from './pool/ready.js';
import { machineView } from './views.js';
import { Network } from '../core/network.js';
import type { BlobStore } from '../store/blobs/types.js';
import { MachinePlacement, type Reservation } from './placement.js';
import { MachineStowage } from './storage/stowage.js';
import { StateReports } from './state-reports.js';

/**
 * Machines' runs: rows in the metadata store, one MachineRun per machine while the server lives,
 * their lifecycle steps (pause, hibernate, resume, stop, remove), the host and the pool (templates,
 * ready VMs), and in a cluster where each runs (machines/placement.ts). A part of the `Machines`
 * service (machines.ts), which makes and changes machines through it; nothing else uses it.
 */
export class MachineRuns {
  host_: MachineHost | null = null;
  opening: Promise<MachineHost> | null = null;
  templates: Templates | null = null;
  /** Machines restored ahead for hot templates (machines/pool/ready.ts). */
  ready: ReadyPool | null = null;
  /** This server's runs by machine id. */
  readonly active = new Map<string, MachineRun>();
  readonly io: MachineIo;
  /** How long each kind of step took the last time (the bench reads the source's pause in a fork here). */
  readonly lastStep = { restore: 0, adopt: 0, freeze: 0, hibernate: 0 };
  /** What a stopped copy of a running machine's memory costs here (the live-copy choice goes by it). */
  readonly copyRate = new CopyRate();
  private warnedUnsound = false;
  /** How the last freeze copied its machine. */
  lastCopy: 'live' | 'stopped' | null = null;
  /** Told before a machine idle for its `idleTimeoutMs` hibernates (Machines commits its mounts then). */
  beforeIdle: (row: MachineRow) => Promise<void> = async () => undefined;
  /** Creates that took a ready VM and that found none; ready VMs waiting now (tests and the bench read them). */
  get readyStats(): { taken: number; missed: number; ready: number } {
    return { taken: this.ready?.counts.taken ?? 0, missed: this.ready?.counts.missed ?? 0, ready: this.ready?.waiting ?? 0 };
  }

  readonly layout: MachineLayout;
  readonly disks: MachineDisks;
  readonly network: Network;
  /** Cluster mode: where machines run and how they move (machines/placement.ts); null in the embedded default. */
  readonly place: MachinePlacement | null;
  /** `machine.state` events of the machines this worker runs. */
  private readonly states: StateReports;

  /**
   * `blobs`: the cluster's object store (cluster mode), where hibernated machines and snapshots
   * are kept too. `backend`: the VM backend (vm/types.ts); absent: QEMU, opened on first use.
   */
  constructor(readonly deps: Deps, readonly contexts: ContextAccess, blobs?: BlobStore, private readonly backend?: VmBackend) {
    this.network = new Network(deps);
    this.states = new StateReports(deps.events);
    this.layout = new MachineLayout(deps.config.home, deps.config.cache);
    this.disks = new MachineDisks(deps, this.layout);
    this.io = new MachineIo((caller, id) => this.running(caller, id), deps.config);
    this.place = deps.cluster && blobs
      ? new MachinePlacement(deps.cluster, new MachineStowage(blobs, this.layout, deps.log, deps.dialer), deps.metadata, this.layout, deps.config)
      : null;
    this.place?.onLost((id) => { void this.lost(id); });
  }

  /**
   * Writes a machine's row; in a cluster, fenced by its lease: the one this worker holds (or held
   * and lost), else one taken for the write (machines/placement.ts, `leased`).
   */
  async write(row: MachineRow): Promise<void> {
    if (this.place) await this.place.leased(row.id, (fence) => this.deps.metadata.machines.update(row, fence));
    else await this.deps.metadata.machines.update(row);
    this.states.report(row);
  }

  /**
   * Cluster mode: another worker took this machine over (this one was taken for gone, say after a
   * pause longer than its heartbeat): its QEMU here ends, and nothing more of it is written here.
   */
  async lost(id: string): Promise<void> {
    const run = this.active.get(id);
    if (!run) return;
    this.states.forget(id);
    this.deps.log.warn({ machine: id }, 'machine taken over by another worker: its process here ends');
    await run.serial(() => run.abandon()).catch((err: unknown) => this.deps.log.error({ err, machine: id }, 'ending a machine taken over by another worker failed'));
  }

  /** Cluster mode: the API of the live worker that runs machine `id`, when that is another worker (api/routing.ts). */
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

  /**
   * At start: the host is opened when its VM backend can be (QEMU: the assets are built); what a crash left of machines that
   * have no row goes (ready VMs, cut-short creates and forks: their QEMUs died with the process);
   * machines a crash left running are stopped.
   */
  async open(): Promise<void> {
    if (this.backend || QemuBackend.available(this.deps.config.cache)) await this.host();
    // Run directories and disk files are this worker's own; a machine without a row is nobody's.
    const swept = await this.disks.sweep();
    if (swept > 0) this.deps.log.info({ files: swept }, 'removed what a crash left of machines that have no row (ready machines, cut-short creates and forks)');
    // In a cluster the rows are every worker's, and nothing yet says which worker runs which
    // machine: a worker's start leaves them as they are (docs/deploy.md, what is not shared yet).
    if (this.deps.cluster) return;
    for (const row of await this.deps.metadata.machines.list()) {
      if (row.state === 'hibernated' && (existsSync(this.layout.hibernation(row.id).state) || existsSync(this.layout.coldMarker(row.id)))) {
        // A restored home's run directories are root's (a restore runs without the VM backend): its VMs' uid's again.
        if (this.host_) this.host_.give(this.layout.runDir(row.id));
        continue;
      }
      if (row.state !== 'stopped') {
        await this.deps.metadata.machines.update({ ...row, state: 'stopped' });
        this.states.seen(row);
        this.states.report({ ...row, state: 'stopped' });
        this.deps.log.warn({ machine: row.id, was: row.state }, 'machine stopped: its memory did not survive the server');
      }
    }
  }

  /** The accelerator machines use (healthz), null while the VM backend is not open (QEMU: its assets are not built). */
  accel(): VmBackend['accel'] | null { return this.host_?.backend.accel ?? null; }

  host(): Promise<MachineHost> {
    if (this.host_) return Promise.resolve(this.host_);
    const { config, host: runtime, log, snapshotter: layers } = this.deps;
    this.opening ??= (this.backend ? Promise.resolve(this.backend) : QemuBackend.open({
      layout: this.layout, cache: config.cache, accel: config.machines.accel, budgetMb: config.machines.memoryBudgetMb, runtime,
      forward: () => this.deps.forwarder.installed(),
    }))
      .then((backend) => {
        const h = new MachineHost(this.layout, backend);
        this.host_ = h;
        this.templates = new Templates(h, layers, log, this.deps.trust);
        this.ready = new ReadyPool({ host: h, egress: this.deps.egress, templates: this.templates, config: config.machines, log, room: (mb) => this.hasRoom(mb) });
        return h;
      })
      .finally(() => { this.opening = null; });
    return this.opening;
  }

  /**
   * Garbage collection of templates of tenants' versions (machines/pool/templates.ts, `collect`): those
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

  /**
   * Inserts the row and restores the machine from `src`, or takes over a ready VM made for it (on
   * this worker, with one of `slots`); on failure nothing of it is left. A ready VM that cannot be
   * taken over (its QEMU died after it was handed out) gives way to a restore of its template.
   */
  async start(row: MachineRow, src: RestoreSource | ReadyVm, slots: Reservation | null): Promise<MachineRun> {
    const ready = 'vm' in src ? src : null;
    // Its creator holds the template until this returns; then the row's disk chain names it.
    ready?.release();
    try {
      await this.place?.take(row.id);
      slots?.bind(row.id);
      await this.deps.metadata.machines.create(row);
      this.states.report(row);
    } catch (e) {
      if (ready) await this.ready?.discard(ready);
      throw e;
    }
    const run = this.runOf(row);
    if (ready) this.ready?.handed(ready); // counted as the run's from here
    try {
      await run.serial(() => (ready ? this.adoptOrRestore(run, ready) : run.restore(src as RestoreSource)));
    } catch (e) {
      await this.discard(run);
      if (e instanceof ShellbaseError) throw e;
      throw new ShellbaseError('unavailable', `machine ${row.id} did not start: ${(e as Error).message}`, { hint: 'try again; if it persists, the server log has the reason' });
    }
    return run;
  }

  /**
   * Takes over `ready`, or, when the take-over itself fails (adopt ended the ready VM: `run.vm` is
   * empty again), restores its template as a create without one would: the ready VM's disk holds
   * its guest's writes, so the machine gets a fresh overlay first. A failure after the ready VM
   * ran as the machine (its row not saved) is the create's failure, as for a restore.
   */
  private async adoptOrRestore(run: MachineRun, ready: ReadyVm): Promise<void> {
    try {
      await run.adopt(ready);
    } catch (err) {
      if (run.vm) throw err;
      this.deps.log.warn({ err, machine: run.row.id }, 'a ready machine could not be taken over; restoring its template instead');
      const { template } = ready;
      await rm(run.row.spec.disk[0], { force: true });
      await this.host_!.backend.overlay(template.disk, run.row.spec.disk[0]);
      await run.restore(templateSource(template));
    }
  }

  async discard(run: MachineRun): Promise<void> {
    const { tenantId, id } = run.row;
    const remove = async (fence?: LeaseFence) => {
      await run.destroy();
      this.active.delete(id);
      await this.deps.metadata.machines.delete(tenantId, id, fence);
    };
    // In a cluster under its lease, taken first when this worker does not hold it: a machine
    // another worker runs is left whole (`unavailable`).
    if (this.place) await this.place.leased(id, remove);
    else await remove();
    this.states.report(run.row, 'deleted');
    await this.place?.forget(run.row.id);
    await this.place?.dropped(run.row.id);
    await this.disks.collect(run.row.tenantId, run.row.spec.disk);
  }

  /**
   * Refuses a start that would pass the tenant's quota, the host's cap or its memory budget; in a
   * cluster, also takes the slots of the quota counted over every worker (given back by `done`
   * unless a machine took them).
   */
  async admit(caller: Pick<Caller, 'tenantId' | 'quotas'>, memoryMb: number, count: number, own?: ReadyVm | null): Promise<Reservation | null> {
    tenantRoom(this.deps.config, this.localRuns(), caller, count);
    await this.withRoom(memoryMb, count, own);
    return this.place ? this.place.reserve(caller, count) : null;
  }

  /**
   * Refuses `count` more machines of `memoryMb` past the host's cap or memory budget. One that
   * would fit without the ready VMs (machines/pool/ready.ts) ends them first and is let through. `own`:
   * the ready VM the asking create took, which needs no room of its own.
   */
  private async withRoom(memoryMb: number, count: number, own?: ReadyVm | null): Promise<void> {
    const check = (held?: Held) => hostRoom(this.deps.config.machines, this.localRuns(), memoryMb, count, held);
    const held = this.ready?.held(own);
    try {
      check(held);
    } catch (e) {
      if (!this.ready || !held?.count) throw e;
      check(); // throws if even without them it would not fit: they stay
      await this.ready.dropAll();
      check(this.ready.held(own));
    }
  }

  /** Whether the host has room for two more machines of `memoryMb` on top of its machines and ready VMs. */
  private hasRoom(memoryMb: number): boolean {
    try {
      hostRoom(this.deps.config.machines, this.localRuns(), memoryMb, 2, this.ready?.held());
      return true;
    } catch {
      return false;
    }
  }

  runOf(row: MachineRow): MachineRun {
    let run = this.active.get(row.id);
    if (!run) {
      this.states.seen(row);
      run = new MachineRun(row, {
        host: this.host_!,
        save: async (r) => { await this.write(r); await this.place?.saved(r); },
        ...this.place?.runHooks(this.deps.log),
        meter: async (r, wallMs, cpuMs, { activeMs, bytesOut, bytesIn }) => {
          this.deps.meter.runEnded('machine', wallMs, activeMs);
          await this.deps.metadata.usage.record({
            tenantId: r.tenantId, context: r.spec.context ?? `machine:${r.id}`, kind: 'machine', createdAt: new Date().toISOString(),
            cpuMs, wallMs, activeMs, memoryPeakBytes: r.spec.memoryMb * 2 ** 20, bytesWritten: 0, exitCode: null, egressBytes: bytesOut, ingressBytes: bytesIn,
          });
        },
        // A session even for "none" (it refuses every connection): a running machine's policy may widen
        // (setNetwork). None where the backend's guests have no network.
        egress: async (r, ahead) => {
          if (!this.host_!.backend.networked) return null;
          const spec = { tenantId: r.tenantId, context: r.spec.context ?? `machine:${r.id}`, kind: 'machine' as const, policy: await this.network.effectiveOf(r.tenantId, r.spec.context, r.spec.network) };
          if (!ahead) return this.deps.egress.open(spec, this.host_!.uid);
          ahead.assign(spec);
          return ahead;
        },
        admit: (r) => this.withRoom(r.spec.memoryMb, 1),
        step: (step, ms) => { this.lastStep[step] = ms; this.deps.meter.machineStep(step, ms); },
        beforeIdle: (r) => this.beforeIdle(r),
        liveCopy: async (used, sound) => {
          const { liveCopy, pauseMs } = this.deps.config.machines;
          if (!sound && liveCopy === 'on' && !this.warnedUnsound) {
            this.warnedUnsound = true;
            this.deps.log.warn('SHELLBASE_MACHINES_LIVE_COPY=on, but this host\'s QEMU does not track every page a running guest writes (TCG before QEMU 9.0) and the machine was made before its RAM was sized for it: it is copied stopped');
          }
          return copiesLive(liveCopy, used, this.copyRate, pauseMs, sound);
        },
        stoppedCopy: (ms, used) => this.copyRate.note(ms, used),
        liveCopyFailed: (r, err) => this.deps.log.warn({ machine: r.id, err }, 'the live copy failed; the machine is copied stopped'),
        copied: (how) => { this.lastCopy = how; },
      });
      this.active.set(row.id, run);
    }
    return run;
  }

  /** The machines this server runs (in a cluster, not those it only looked at for another worker). */
  localRuns(): MachineRun[] {
    return [...this.active.values()].filter((r) => !this.place || this.place.holds(r.row.id));
  }

  /** Its row as this server knows it: the running process's, or (in a cluster, of a machine another worker may have moved) the store's. */
  current(row: MachineRow): MachineRow {
    const run = this.active.get(row.id);
    return run && (!this.place || this.place.holds(row.id)) ? run.row : row;
  }

  async row(caller: Caller, id: string): Promise<MachineRow> {
    if (typeof id !== 'string' || !/^m_[a-z0-9]{1,64}$/.test(id)) throw notFound('machine', String(id));
    const local = this.active.get(id);
    const row = local && (!this.place || this.place.holds(id)) ? local.row : await this.deps.metadata.machines.get(caller.tenantId, id);
    if (!row || row.tenantId !== caller.tenantId) throw notFound('machine', id);
    return row;
  }

  /** `readOnly`: in a cluster, a machine another worker runs is shown as its row says (else `unavailable` here). */
  async runFor(caller: Caller, id: string, readOnly = false): Promise<MachineRun> {
    const row = await this.row(caller, id);
    await this.host();
    const run = this.runOf(row);
    await this.place?.settle(run, { readOnly });
    return run;
  }

  /** A machine that runs (woken from hibernation if need be), counted as used until `release`. */
  async running(caller: Caller, id: string): Promise<{ run: MachineRun; release: () => void }> {
    const run = await this.runFor(caller, id);
    const release = await run.acquire();
    return { run, release };
  }

  async get(caller: Caller, id: string): Promise<Machine> { return this.toMachine(await this.runFor(caller, id, true)); }

  async list(caller: Caller): Promise<Machine[]> {
    return (await this.deps.metadata.machines.list(caller.tenantId)).map((r) => this.toMachine(this.current(r)));
  }

  async pause(caller: Caller, id: string): Promise<Machine> { return this.step(caller, id, (r) => r.pause()); }
  /**
   * Memory to disk and QEMU ended now, as after idleTimeoutMs; the next use restores it.
   * `extensions`: changes of what another API keeps about it (compat/e2b: paused), written with
   * the hibernated state (in a cluster, before the lease is given up, so no worker finds the
   * sandbox hibernated and not yet paused). `memory` false: its memory is dropped instead (its
   * disk kept; MachineRun.powerOff) and the next use boots it; one hibernated with its memory
   * is woken first, so that its guest flushes its writes.
   */
  async hibernate(caller: Caller, id: string, extensions?: Record<string, unknown>, memory = true): Promise<Machine> {
    return this.step(caller, id, async (r) => {
      if (!memory && r.state === 'hibernated' && !r.cold) await r.resume();
      if (r.state !== 'hibernated') return memory ? r.hibernate(extensions) : r.powerOff(extensions);
      if (!extensions) return;
      const next = { ...r.row, spec: withExtensions(r.row.spec, extensions) };
      await this.write(next);
      r.row = next;
    });
  }
  async resume(caller: Caller, id: string): Promise<Machine> { return this.step(caller, id, (r) => r.resume()); }
  async stop(caller: Caller, id: string): Promise<Machine> { return this.step(caller, id, (r) => r.stop()); }

  /**
   * The last `lines` lines of its serial console as this worker has it (the machine is not woken).
   * In a cluster a call reaches the worker that runs the machine (api/routing.ts).
   */
  async consoleTail(caller: Caller, id: string, lines: number): Promise<MachineConsole> {
    await this.row(caller, id);
    return readConsoleTail(runFiles(this.layout.runDir(id)).console, lines);
  }

  step(caller: Caller, id: string, f: (r: MachineRun) => Promise<void>): Promise<Machine> {
    return durably(this.deps.durability, async () => {
      const run = await this.runFor(caller, id);
      await run.serial(() => f(run));
      return this.toMachine(run);
    });
  }

  remove(caller: Caller, id: string): Promise<void> {
    return durably(this.deps.durability, () => this.removeNow(caller, id));
  }

  async removeNow(caller: Caller, id: string): Promise<void> {
    const run = await this.runFor(caller, id);
    await run.serial(() => this.discard(run));
  }

  /** Machines' rows as they are now (of one tenant, or all), for APIs that keep fields in them (compat/e2b). */
  async rows(tenantId?: string): Promise<MachineRow[]> {
    return (await this.deps.metadata.machines.list(tenantId)).map((r) => this.current(r));
  }

  async rowOf(caller: Caller, id: string): Promise<MachineRow> { return this.row(caller, id); }

  /** Any tenant's machine by id, as the store has it (cluster mode: one another worker made); null when there is none. */
  async find(id: string): Promise<MachineRow | null> {
    const row = await this.deps.metadata.machines.find(id);
    return row && this.current(row);
  }

  /** Server shutdown: running and paused machines hibernate (their memory goes to disk), then the RAM directory goes. */
  async close(): Promise<void> {
    await this.ready?.close();
    await Promise.all(this.localRuns().map((r) => r.serial(async () => {
      if (r.state === 'paused') await r.resume();
      if (r.state === 'running') await r.hibernate();
    }).catch(async (err) => { this.deps.log.error({ err, machine: r.row.id }, 'hibernating at shutdown failed'); await r.destroy(); })));
    await this.host_?.close();
  }

  toMachine(r: MachineRun | MachineRow): Machine {
    return machineView(r instanceof MachineRun ? r.row : r, this.deps.config.gatewayPort);
  }


  /** Bytes a tenant's machines hold on disk: disks, snapshots, templates of its versions, hibernated memory. */
  storedBytes(tenantId: string): Promise<number> { return this.disks.storedBytes(tenantId); }
}

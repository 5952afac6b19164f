import { existsSync, rmSync, writeFileSync } from 'node:fs';
import type { MachineState, NetworkPolicy } from '@shellbase/protocol';
import { ShellbaseError } from '../errors.js';
import type { MachineRow } from '../store/metadata/types.js';
import type { Agent } from './vm/agent.js';
import { GuestError, LiveCopyError, type Vm } from './vm/types.js';
import { freezeLive, freezeStopped } from './storage/freeze.js';
import { bootVm, restoreVm, type RestoreSource } from './pool/restore.js';
import type { ReadyVm } from './pool/ready.js';
import { MACHINE_LIFECYCLE, type MachineEvent } from './lifecycle.js';
import { IdleLease } from '../core/idle-lease.js';
import type { RunHooks } from './run-hooks.js';
import { withExtensions } from './extensions.js';
import type { EgressSession, Traffic } from '../net/egress.js';

export type { RestoreSource } from './pool/restore.js';
export type { RunHooks } from './run-hooks.js';

/**
 * One machine's process and lifecycle: starting → running ⇄ paused, running →
 * hibernated (with its memory, or powered off with its disk) → (next use)
 * running, and stopped. Lifecycle steps run one at a time (`serial`); execs
 * and port traffic count as users, and a machine with no user for
 * `idleTimeoutMs` hibernates.
 */
export class MachineRun {
  /** Its VM while it holds memory (machines/vm/types.ts). */
  vm: Vm | null = null;
  private chain: Promise<unknown> = Promise.resolve();
  /** Execs, file calls and port traffic in flight; with none for idleTimeoutMs it hibernates. */
  private readonly lease = new IdleLease();
  private since = 0;
  private cpuAtStart = 0;
  /** The way out of the running VM (a networked backend's), and how much of its traffic is metered already. */
  private session: EgressSession | null = null;
  private metered: Traffic = { bytesOut: 0, bytesIn: 0 };
  /** A live copy is under way (machines/storage/freeze.ts): the machine runs and takes users meanwhile. */
  copying = false;

  constructor(public row: MachineRow, readonly hooks: RunHooks) {}

  get state(): MachineState { return this.row.state; }
  /** Its VM's guest agent. */
  get agent(): Agent | null { return this.vm?.agent ?? null; }
  /** Its sockets, console log and (hibernated) RAM and device state. */
  get dir(): string { return this.hooks.host.runDir(this.row.id); }
  get ramFile(): string { return this.layout.ramFile(this.row.id); }
  /** Hibernated without its memory: its wake boots it from its disk. */
  get cold(): boolean { return this.row.state === 'hibernated' && existsSync(this.layout.coldMarker(this.row.id)); }
  portSocket(port: number): string { return this.layout.portSocket(this.dir, port); }
  private get layout() { return this.hooks.host.layout; }

  /** Runs lifecycle steps one after another. */
  serial<T>(step: () => Promise<T>): Promise<T> {
    this.queued++;
    const next = this.chain.then(step, step).finally(() => { this.queued--; });
    this.chain = next.catch(() => undefined);
    return next;
  }

  /** Lifecycle steps running or waiting in `serial`. */
  private queued = 0;

  /** Whether a lifecycle step is running or waiting (a hibernation's upload, say). */
  get busy(): boolean { return this.queued > 0; }

  /** Restores the machine from `src` onto a disk whose writable top is `row.spec.disk[0]`. */
  async restore(src: RestoreSource): Promise<void> {
    const t0 = performance.now();
    try {
      this.session = await this.hooks.egress(this.row);
      this.metered = { bytesOut: 0, bytesIn: 0 };
      this.vm = await restoreVm(this.hooks.host, this.row, src, this.session?.socket ?? null);
    } catch (e) {
      await this.session?.close().catch(() => undefined);
      this.session = null;
      throw e;
    }
    await this.started(t0, 'restore');
  }

  /** Boots the machine from its disk chain (its wake after a hibernation without memory). */
  private async boot(): Promise<void> {
    const t0 = performance.now();
    try {
      this.session = await this.hooks.egress(this.row);
      this.metered = { bytesOut: 0, bytesIn: 0 };
      this.vm = await bootVm(this.hooks.host, this.row, this.session?.socket ?? null);
    } catch (e) {
      await this.session?.close().catch(() => undefined);
      this.session = null;
      throw e;
    }
    await this.started(t0, 'boot');
  }

  /**
   * Takes over `ready` (machines/pool/ready.ts), restored from this machine's template for its id,
   * tenant and disk: its egress session gets the machine's policy, its CPUs run again, and the
   * guest settles (clock to now, fresh entropy) as after any restore.
   */
  async adopt(ready: ReadyVm): Promise<void> {
    const t0 = performance.now();
    this.vm = ready.vm;
    try {
      this.session = await this.hooks.egress(this.row, ready.session ?? undefined);
      this.metered = { bytesOut: 0, bytesIn: 0 };
      await ready.vm.resume();
      await ready.vm.agent.settle();
    } catch (e) {
      await ready.vm.kill();
      this.vm = null;
      await ready.session?.close().catch(() => undefined);
      this.session = null;
      rmSync(this.ramFile, { force: true });
      throw e;
    }
    await this.started(t0, 'adopt');
  }

  /** A restored, adopted or booted VM runs as this machine from now on. */
  private async started(t0: number, step: 'restore' | 'adopt' | 'boot'): Promise<void> {
    const vm = this.vm!;
    void vm.exited.then(() => this.onExit());
    this.since = Date.now();
    this.cpuAtStart = vm.cpuMs();
    await this.go(step === 'boot' ? 'booted' : 'restored');
    if (step !== 'boot') this.hooks.step(step, performance.now() - t0);
    this.lease.watch(this.row.spec.idleTimeoutMs, () => {
      void this.hooks.beforeIdle(this.row).catch(() => undefined)
        .then(() => this.serial(() => (this.row.state === 'running' && !this.lease.inUse ? this.hibernate() : Promise.resolve()))).catch(() => undefined);
    });
  }

  /** Its egress session (while its VM runs) follows `policy` from now on. */
  setEgressPolicy(policy: NetworkPolicy): void { this.session?.setPolicy(policy); }

  /** Counts a user (exec, file call, port traffic) while the machine runs; wakes it from hibernation. */
  async acquire(): Promise<() => void> {
    const release = this.lease.acquire();
    try {
      // Behind any lifecycle step in progress (a hibernation that began just before this call ends
      // first, then this wakes the machine again); a live copy lets the machine run, and its users.
      if (!(this.copying && this.queued === 1 && this.row.state === 'running')) {
        await this.serial(() => (this.row.state === 'hibernated' ? this.wake() : Promise.resolve()));
      }
      if (this.row.state !== 'running') throw this.notRunning();
    } catch (e) {
      release();
      throw e;
    }
    this.lease.touch();
    return release;
  }

  notRunning(): ShellbaseError {
    const hint = this.row.state === 'paused' ? 'resume it first (POST .../resume)'
      : this.row.state === 'lost' ? 'the worker that ran it died with its memory: restore one of its snapshots, or delete it'
        : 'create a new machine, or fork or restore one from a snapshot';
    return new ShellbaseError('failed_precondition', `machine ${this.row.id} is ${this.row.state}`, { details: { machine: this.row.id, state: this.row.state }, hint });
  }

  async pause(): Promise<void> {
    if (this.row.state === 'paused') return;
    MACHINE_LIFECYCLE.next(this.row.id, this.row.state, 'pause');
    await this.vm!.pause();
    await this.endSegment();
    await this.go('pause');
  }

  async resume(): Promise<void> {
    if (this.row.state === 'hibernated') return this.wake();
    if (this.row.state === 'running') return;
    MACHINE_LIFECYCLE.next(this.row.id, this.row.state, 'resume');
    await this.vm!.resume();
    this.since = Date.now();
    this.cpuAtStart = this.vm!.cpuMs();
    this.lease.touch();
    await this.go('resume');
  }

  /**
   * Freezes RAM, devices and disk at one instant into `into` (its RAM file
   * and state file), then lets the machine go on. The disk's current top
   * becomes read-only (the snapshot's chain); a new overlay takes the writes.
   * Returns the frozen chain. Milliseconds of pause: that is the fork's cost. A running machine
   * is copied live where its VM can (`Vm.copyLive`: it pauses only for the last dirty pages)
   * unless the server's setting says otherwise (SHELLBASE_MACHINES_LIVE_COPY); a paused one is
   * copied as it stands.
   */
  async freeze(into: { ram: string; state: string }): Promise<string[]> {
    if (this.row.state !== 'running' && this.row.state !== 'paused') throw this.notRunning();
    if (this.row.state === 'running' && this.vm?.copyLive && await this.hooks.liveCopy(this.vm.usedMiB(), this.vm.liveCopySound ?? false)) {
      try {
        const frozen = await freezeLive(this, into);
        this.hooks.copied('live');
        return frozen;
      } catch (e) {
        if (!(e instanceof LiveCopyError) || !this.vm?.alive) throw e;
        this.hooks.liveCopyFailed(this.row, e); // and a stopped copy makes it
      }
    }
    const frozen = await freezeStopped(this, into);
    this.hooks.copied('stopped');
    return frozen;
  }

  /**
   * Grows the disk to `diskGb` GiB while the machine runs: the VM grows the top of its chain, the
   * guest's kernel sees the new capacity, and the guest grows its mounted root file system.
   * Copies made from now on (forks, snapshots) inherit the size.
   */
  async growDisk(diskGb: number): Promise<void> {
    if (this.row.state !== 'running') throw this.notRunning();
    const sectors = diskGb * 2 ** 21;
    await this.vm!.resizeDisk(sectors * 512);
    // The size is the guest's from here on, whatever resize2fs says.
    this.row = { ...this.row, spec: { ...this.row.spec, diskGb } };
    await this.hooks.save(this.row);
    try {
      await this.vm!.guest.growRoot(sectors);
    } catch (e) {
      if (!(e instanceof GuestError)) throw e;
      throw new ShellbaseError('failed_precondition', `machine ${this.row.id}'s disk is ${diskGb} GiB now, but its file system did not grow: ${e.message}`, {
        details: { machine: this.row.id, diskGb }, hint: 'run `resize2fs /dev/vda` in the machine (its image needs e2fsprogs)',
      });
    }
  }

  /** RAM and device state to the machine's directory, the VM ended, memory freed; `extensions`' changes are written with the hibernated state. */
  async hibernate(extensions?: Record<string, unknown>): Promise<void> {
    if (this.row.state === 'hibernated') return;
    MACHINE_LIFECYCLE.next(this.row.id, this.row.state, 'hibernate');
    const vm = this.vm!;
    const t0 = performance.now();
    vm.agent.close();
    if (this.row.state === 'running') { await vm.pause(); await this.endSegment(true); }
    const saved = this.layout.hibernation(this.row.id);
    await vm.save(saved);
    await vm.quit();
    this.dropProcess();
    if (this.hooks.stow) {
      const { stored: _old, ...spec } = this.row.spec;
      this.row = { ...this.row, spec };
      try {
        this.row = { ...this.row, spec: { ...spec, stored: await this.hooks.stow(this.row, saved) } };
      } catch (err) {
        this.hooks.stowFailed?.(this.row, err);
      }
    }
    this.row = { ...this.row, spec: extensions ? withExtensions(this.row.spec, extensions) : this.row.spec };
    await this.go('hibernate');
    this.hooks.step('hibernate', performance.now() - t0);
  }

  /**
   * Its disk kept and its memory dropped: the guest's writes flushed (`sync`), its VM ended and
   * nothing of its memory saved; its next use boots it from its disk, its processes gone.
   * `extensions` as for `hibernate`. Never stowed (cluster mode): it wakes on this worker.
   */
  async powerOff(extensions?: Record<string, unknown>): Promise<void> {
    if (this.row.state === 'hibernated') return;
    MACHINE_LIFECYCLE.next(this.row.id, this.row.state, 'powerOff');
    const t0 = performance.now();
    await this.flushAndQuit(this.vm!, 30_000);
    this.dropProcess();
    writeFileSync(this.layout.coldMarker(this.row.id), '');
    this.row = { ...this.row, spec: extensions ? withExtensions(this.row.spec, extensions) : this.row.spec };
    await this.go('powerOff');
    this.hooks.step('hibernate', performance.now() - t0);
  }

  private async wake(): Promise<void> {
    if (this.row.state !== 'hibernated') return;
    const saved = this.layout.hibernation(this.row.id);
    const cold = this.layout.coldMarker(this.row.id);
    const boots = existsSync(cold);
    await this.hooks.admit(this.row);
    if (this.hooks.unstow) {
      this.hooks.host.runDir(this.row.id);
      this.hooks.host.disksDir(this.row.tenantId);
      this.row = await this.hooks.unstow(this.row, saved);
    }
    await this.go('wake');
    try {
      await (boots ? this.boot() : this.restore(saved));
    } catch (e) {
      await this.go('wakeFailed');
      throw e;
    }
    for (const f of [saved.ram, saved.state, cold]) rmSync(f, { force: true });
  }

  /** Powers the machine off (after a guest `sync`); its disk stays, its memory is gone. */
  async stop(): Promise<void> {
    if (this.row.state === 'stopped') return;
    if (this.vm) await this.flushAndQuit(this.vm, 10_000);
    this.dropProcess();
    for (const f of [...Object.values(this.layout.hibernation(this.row.id)), this.layout.coldMarker(this.row.id)]) rmSync(f, { force: true });
    await this.go('stop');
  }

  /** The guest's writes flushed (`sync`, at most `syncMs`; a paused guest runs for it), then its VM ended. */
  private async flushAndQuit(vm: Vm, syncMs: number): Promise<void> {
    if (this.row.state === 'paused') await vm.resume().catch(() => undefined);
    await vm.agent.run({ argv: ['sync'], timeoutMs: syncMs, outputBytes: 1024 }).catch(() => undefined);
    vm.agent.close();
    // A paused machine's stretch was metered when it paused: only its session closes (dropProcess).
    if (this.row.state === 'running') await this.endSegment(true);
    await vm.quit();
  }

  /** Cluster mode: the worker that ran it died, and its memory with it (this worker found it so). */
  async lose(): Promise<void> {
    if (this.vm) return;
    await this.go('lost');
  }

  /** Ends its VM at once and removes the machine's run files (its row and disks are the caller's). */
  async destroy(): Promise<void> {
    if (this.vm && this.row.state === 'running') await this.endSegment(true);
    await this.vm?.kill();
    this.dropProcess();
    if (existsSync(this.dir)) rmSync(this.dir, { recursive: true, force: true });
  }

  /**
   * Cluster mode: another worker took the machine over. Its VM here ends and nothing of it is
   * written (its row is the other worker's); its files here stay (a hibernation's memory may be
   * the only copy).
   */
  async abandon(): Promise<void> {
    const vm = this.vm;
    if (!vm) return;
    try {
      // Metering may fail as the lease did (the database out of reach): the VM ends all the same.
      if (this.row.state === 'running') await this.endSegment(true).catch(() => undefined);
    } finally {
      await vm.kill();
      this.dropProcess();
    }
  }

  /** The VM ended without being asked (the guest powered off, or it crashed). */
  private onExit(): void {
    if (!this.vm || this.vm.exitedOnPurpose) return;
    void this.serial(async () => {
      if (!this.vm || this.vm.exitedOnPurpose) return;
      if (this.row.state === 'running') await this.endSegment(true);
      this.dropProcess();
      await this.go('exited');
    });
  }

  /** The VM is gone (or going): its agent connection, idle timer and RAM file go with it. */
  private dropProcess(): void {
    this.vm?.agent.close();
    this.vm = null;
    this.lease.unwatch();
    // A paused machine's session (its segment, and its traffic, were metered when it paused).
    void this.session?.close().catch(() => undefined);
    this.session = null;
    rmSync(this.ramFile, { force: true });
  }

  /** Meters the running time since `since`; `last` (the VM is ending) closes the egress session first, so its open connections count. */
  private async endSegment(last = false): Promise<void> {
    const wall = Date.now() - this.since;
    const cpu = Math.max(0, (this.vm?.cpuMs() ?? this.cpuAtStart) - this.cpuAtStart);
    const s = this.session;
    if (s && last) { this.session = null; await s.close().catch(() => undefined); }
    const traffic = s ? { bytesOut: s.traffic.bytesOut - this.metered.bytesOut, bytesIn: s.traffic.bytesIn - this.metered.bytesIn } : { bytesOut: 0, bytesIn: 0 };
    this.metered = s && !last ? { ...s.traffic } : { bytesOut: 0, bytesIn: 0 };
    await this.hooks.meter(this.row, wall, cpu, { activeMs: Math.min(this.lease.takeActiveMs(), wall), ...traffic });
  }

  /** Moves along the lifecycle table (machines/lifecycle.ts) and saves the row. */
  private async go(event: MachineEvent): Promise<void> {
    this.row = { ...this.row, state: MACHINE_LIFECYCLE.next(this.row.id, this.row.state, event) };
    await this.hooks.save(this.row);
  }
}

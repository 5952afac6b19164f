import { appendFileSync, copyFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import type { Snapshotter } from '../../../store/snapshotter/types.js';
import { DISK_GB } from '../../storage/disk.js';
import { runFiles } from '../../layout.js';
import { Agent } from '../agent.js';
import { ownRam } from '../ram.js';
import type { GuestOps, Vm, VmBackend, VmIdentity, VmImage, VmSpec } from '../types.js';
import { MemoryAgent } from './agent.js';
import { buildMemoryDisk, DiskChain, makeOverlay } from './disk.js';
import { freshMemory, Guest, MemoryGuestOps, parseMemory, type GuestMemory } from './guest.js';

/** Bump when what a state file holds changes. */
const STATE_FORMAT = 1;

/** What an in-memory VM's state file holds: what it was saved as. */
interface SavedState {
  format: typeof STATE_FORMAT;
  kind: 'shellbase-memory-state';
  identity: VmIdentity;
  memoryMb: number;
  ramPadKb: number;
  cpus: number;
}

/**
 * VMs in this process, for the fast test tier: no emulator, no root. A VM is a guest
 * (memory/guest.ts: files, a clock, processes of its own) and its agent (memory/agent.ts: the
 * spawner's frames, in process). Disks are JSON files of entries, each backed by the next
 * (memory/disk.ts), written through as the guest writes; memory files hold the guest's `/run`,
 * clock and processes; state files what the VM was saved as (identity and size, checked on
 * restore). A guest boots only from a disk with /sbin/init. Guests have no network: exposed
 * ports reach the guest's `serve` processes only.
 */
export class MemoryVmBackend implements VmBackend {
  readonly kind = 'memory';
  readonly identity: VmIdentity = { build: 'shellbase in-memory VM 1', machineType: 'memory', accel: 'memory' };
  readonly accel = { accel: 'memory', reason: 'in-memory VMs (the fast test tier)' };
  readonly uid = process.getuid?.() ?? 0;
  readonly reservedPorts: readonly number[] = [];
  readonly networked = false;
  readonly ramPadKb = 0;
  readonly bootKey = { vm: 'memory', version: STATE_FORMAT };
  /** VMs that have not ended. */
  readonly vms = new Set<MemoryVm>();

  async buildDisk(o: { snapshotter: Snapshotter; layers: readonly string[]; above: readonly string[]; out: string }): Promise<void> {
    await buildMemoryDisk(o.snapshotter, o.layers, o.above, o.out, DISK_GB * 2 ** 30);
  }

  async overlay(backing: string, file: string): Promise<void> {
    makeOverlay(backing, file);
  }

  async boot(spec: VmSpec): Promise<Vm> {
    const disk = new DiskChain(spec.disk);
    if (disk.entries.get('/sbin/init') === undefined) throw new Error('the guest did not come up: its disk has no /sbin/init');
    const memory = freshMemory(spec.memoryMb, spec.ramPadKb ?? 0);
    writeFileSync(spec.ram, JSON.stringify(memory));
    return await this.start(spec, disk, memory, 'booted');
  }

  async restore(spec: VmSpec, from: VmImage, goOn: () => void = () => undefined): Promise<Vm> {
    try {
      await ownRam(from, spec.ram, async (a, b) => copyFileSync(a, b));
      goOn();
      const state = JSON.parse(readFileSync(from.state, 'utf8')) as SavedState;
      if (state.kind !== 'shellbase-memory-state' || state.format !== STATE_FORMAT) throw new Error(`${from.state} is not a state of the in-memory VMs`);
      for (const k of ['build', 'machineType', 'accel'] as const) {
        if (state.identity[k] !== this.identity[k]) throw new Error(`the state was saved with ${k} ${state.identity[k]}; this backend has ${this.identity[k]}`);
      }
      if (state.memoryMb !== spec.memoryMb || state.ramPadKb !== (spec.ramPadKb ?? 0)) {
        throw new Error(`the state was saved with ${state.memoryMb} MiB (+${state.ramPadKb} KiB) of RAM; this VM has ${spec.memoryMb} MiB (+${spec.ramPadKb ?? 0} KiB)`);
      }
      const memory = parseMemory(readFileSync(spec.ram, 'utf8'));
      goOn();
      const vm = await this.start(spec, new DiskChain(spec.disk), memory, 'restored');
      try {
        goOn();
        await vm.agent.settle();
      } catch (e) {
        await vm.kill();
        throw e;
      }
      return vm;
    } catch (e) {
      rmSync(spec.ram, { force: true });
      throw e;
    }
  }

  async close(): Promise<void> {
    if (this.vms.size) throw new Error(`${this.vms.size} in-memory VMs have not ended`);
  }

  private async start(spec: VmSpec, disk: DiskChain, memory: GuestMemory, how: string): Promise<MemoryVm> {
    const vm = new MemoryVm(this, spec, new Guest(disk, memory));
    this.vms.add(vm);
    void vm.exited.then(() => this.vms.delete(vm));
    try {
      for (const p of spec.ports) await vm.expose(p.port, p.socket);
    } catch (e) {
      await vm.kill();
      throw e;
    }
    appendFileSync(runFiles(spec.runDir).console, `in-memory VM ${how} (${spec.memoryMb} MiB, ${spec.cpus} CPU)\n`);
    vm.system.resume();
    return vm;
  }
}

/** One in-memory VM: its guest, its agent, the sockets of its exposed ports. */
export class MemoryVm implements Vm {
  readonly agent: Agent;
  readonly guest: GuestOps;
  readonly exited: Promise<string>;
  exitedOnPurpose = false;
  private readonly agentSide: MemoryAgent;
  private readonly servers: { server: Server; socket: string }[] = [];
  private ended: (why: string) => void = () => undefined;

  constructor(private readonly backend: MemoryVmBackend, private readonly spec: VmSpec, readonly system: Guest) {
    this.exited = new Promise((r) => { this.ended = r; });
    this.agentSide = new MemoryAgent(system, () => { void this.end('the guest powered off'); });
    this.agent = new Agent(this.agentSide.open, spec.guestEnv);
    this.guest = new MemoryGuestOps(system);
  }

  get alive(): boolean { return this.system.state !== 'ended'; }
  cpuMs(): number { return 0; }
  usedMiB(): number { return Buffer.byteLength(JSON.stringify(this.system.memoryImage())) / 2 ** 20; }

  async pause(): Promise<void> { this.live(); this.system.pause(); }
  async resume(): Promise<void> { this.live(); this.system.resume(); }

  async save(into: { ram: string; state: string }): Promise<void> {
    this.paused('save');
    const state: SavedState = { format: STATE_FORMAT, kind: 'shellbase-memory-state', identity: this.backend.identity, memoryMb: this.spec.memoryMb, ramPadKb: this.spec.ramPadKb ?? 0, cpus: this.spec.cpus };
    writeFileSync(into.ram, JSON.stringify(this.system.memoryImage()));
    writeFileSync(into.state, JSON.stringify(state));
  }

  async snapshotDisk(overlay: string): Promise<void> {
    this.paused('snapshotDisk');
    this.system.disk.freeze(overlay);
  }

  async resizeDisk(bytes: number): Promise<void> {
    this.live();
    this.system.disk.resize(bytes);
  }

  /** Connections to `socket` reach guest `port`: a `serve` process's text, or closed at once when nothing listens. */
  async expose(port: number, socket: string): Promise<void> {
    this.live();
    rmSync(socket, { force: true });
    const server = createServer((conn) => {
      conn.on('error', () => undefined);
      void this.system.running().then(() => {
        const text = this.system.listener(port);
        if (text === null) conn.destroy(); else conn.end(text);
      }, () => conn.destroy());
    });
    await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(socket, () => { server.off('error', reject); resolve(); }); });
    this.servers.push({ server, socket });
  }

  async quit(): Promise<void> { this.exitedOnPurpose = true; await this.end('quit'); }
  async kill(): Promise<void> { this.exitedOnPurpose = true; await this.end('killed'); }

  private async end(why: string): Promise<void> {
    if (!this.alive) return this.exited.then(() => undefined);
    this.system.end();
    this.agentSide.end();
    for (const s of this.servers.splice(0)) { s.server.close(); rmSync(s.socket, { force: true }); }
    rmSync(this.spec.ram, { force: true });
    appendFileSync(runFiles(this.spec.runDir).console, `in-memory VM ended: ${why}\n`);
    this.ended(why);
  }

  private live(): void {
    if (!this.alive) throw new Error('the VM has ended');
  }

  private paused(what: string): void {
    this.live();
    if (this.system.state !== 'paused') throw new Error(`${what} needs a paused VM`);
  }
}

import { chmodSync, chownSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ShellbaseError } from '../../errors.js';
import type { Cgroup, HostPrograms } from '../../runtime/index.js';
import type { Snapshotter } from '../../store/snapshotter/types.js';
import { MACHINE_ROOT } from '../../util/idmap.js';
import { run, runOk } from '../../util/proc.js';
import { buildDisk, copySparse, guestLayer, overlay } from '../storage/disk.js';
import { runFiles, type MachineLayout } from '../layout.js';
import { chooseAccel, type AccelChoice } from './accel.js';
import { Agent } from './agent.js';
import { findAssets, type MachineAssets } from './assets.js';
import { liveCopySound, ramPadKb } from './live-copy.js';
import { AGENT_PORT, MACHINE_TYPE, QemuVm, qemuBuild, type Accel, type LaunchSpec } from './qemu.js';
import { QemuMachine } from './qemu-machine.js';
import { ownRam } from './ram.js';
import type { Vm, VmBackend, VmIdentity, VmImage, VmSpec } from './types.js';

/**
 * QEMU runs as host uid 165536 (root of a user namespace that maps only it) under TCG; under KVM
 * it stays host root without capabilities, since /dev/kvm is root's (docs/security.md, threat 15).
 */
const QEMU_UID = MACHINE_ROOT;

/** What QEMU itself may use beyond the guest's RAM (TCG's code cache of TCG_CODE_CACHE_MB, device buffers, threads). */
const QEMU_OVERHEAD_MB = 768;

export interface QemuBackendOptions {
  layout: MachineLayout;
  cache: string;
  accel: 'auto' | Accel;
  /** Guest RAM all machines may have together (MiB): the RAM directory's size. */
  budgetMb: number;
  /** Jails, bridges, helpers and cgroups (bwrap); absent: no machines here. */
  runtime?: HostPrograms;
  /** sbx-forward, which QEMU's guestfwd runs to hand a guest's connection to its egress session. */
  forward: () => string;
}

/**
 * VMs as QEMU microVMs (`-M microvm`), confined by the runtime's jail, their RAM a file of the
 * RAM directory (a tmpfs of the machines' budget at `$SHELLBASE_HOME/machines/ram`, mapped
 * shared, so a fork copies one file), their disks qcow2 chains over a raw ext4 base, their guest
 * agent reached through a bridge into QEMU's network namespace. What every machine on the host
 * shares: the assets (kernel, initramfs), the accelerator, the guest layer. The RAM directory's
 * contents do not survive the server: a running machine is hibernated to disk when the server
 * stops, and is stopped by a crash.
 */
export class QemuBackend implements VmBackend {
  readonly kind = 'qemu';
  readonly reservedPorts = [AGENT_PORT];
  readonly networked = true;
  readonly identity: VmIdentity;
  readonly uid: number;
  readonly ramPadKb: number;
  readonly bootKey: Readonly<Record<string, unknown>>;

  private constructor(private readonly o: QemuBackendOptions & { runtime: HostPrograms }, readonly assets: MachineAssets, readonly accel: AccelChoice,
    private readonly guest: { dir: string; hash: string }, build: string) {
    this.uid = accel.accel === 'tcg' ? QEMU_UID : 0;
    this.identity = { build, machineType: MACHINE_TYPE, accel: accel.accel };
    this.ramPadKb = ramPadKb(accel.accel, build);
    this.bootKey = { assets: assets.tag, guest: guest.hash, qemu: build, type: MACHINE_TYPE, accel: accel.accel };
  }

  /** Whether this host has what QEMU machines need built (the assets). */
  static available(cache: string): boolean { return findAssets(cache) !== null; }

  /** Chooses the accelerator, makes the guest layer and mounts the RAM directory; refuses a host without a runtime or assets. */
  static async open(o: QemuBackendOptions): Promise<QemuBackend> {
    const { runtime } = o;
    if (!runtime) {
      throw new ShellbaseError('failed_precondition', 'machines need a runtime with jails, bridges and helpers (bwrap)', { hint: 'run the server with its bwrap runtime' });
    }
    const assets = findAssets(o.cache);
    if (!assets) {
      throw new ShellbaseError('failed_precondition', 'machine assets (kernel, initramfs) are not built on this host', { hint: 'run `npm run setup` (or `shellbase machine assets`) first' });
    }
    const { layout } = o;
    const accel = await chooseAccel(layout, assets, o.accel);
    const guest = guestLayer(layout);
    const { root, ramDir } = layout;
    // Passable (not listable) by the sandboxes' root: disks are made from `build/` (machines/storage/disk.ts).
    mkdirSync(root, { recursive: true, mode: 0o711 });
    chmodSync(root, 0o711);
    // Passable by QEMU's uid (which owns the RAM files in it), not listable.
    mkdirSync(ramDir, { recursive: true, mode: 0o711 });
    await unmountRam(ramDir); // a crashed server's RAM files are gone with its machines
    await runOk('mount', ['-t', 'tmpfs', '-o', `size=${o.budgetMb + 256}m,mode=0711`, 'shellbase-ram', ramDir]);
    return new QemuBackend({ ...o, runtime }, assets, accel, guest, await qemuBuild());
  }

  /** Hands a file or directory QEMU writes to the uid QEMU runs as. */
  give(file: string): void {
    if (this.uid !== 0) chownSync(file, this.uid, this.uid);
  }

  /** The cgroup of one QEMU process. */
  cgroup(memoryMb: number, cpus: number): Cgroup {
    return this.o.runtime.cgroup({ memoryMb: memoryMb + QEMU_OVERHEAD_MB, pids: 512, cpus });
  }

  /** A raw ext4 image (storage/disk.ts `buildDisk`) with the guest layer and the kernel layer on top, readable by every QEMU. */
  async buildDisk(o: { snapshotter: Snapshotter; layers: readonly string[]; above: readonly string[]; out: string; staging: string }): Promise<void> {
    await buildDisk(o.snapshotter, this.o.runtime, o.layers, [...o.above, this.guest.dir, this.assets.layer], o.out, o.staging);
    chmodSync(o.out, 0o644);
  }

  async overlay(backing: string, file: string, cwd?: string): Promise<void> {
    await overlay(backing, file, cwd);
    this.give(file);
  }

  /** Launches QEMU over the disk and waits until systemd says the system is up (running or degraded). */
  async boot(spec: VmSpec, timeoutMs: number): Promise<Vm> {
    const started = Date.now();
    writeFileSync(spec.ram, ''); // QEMU sizes it; it must exist to be bound into QEMU's confinement
    this.give(spec.ram);
    let qemu: QemuVm | null = null;
    let agent: Agent | null = null;
    try {
      qemu = await QemuVm.launch(this.launchSpec(spec, []));
      await this.bridges(qemu, spec);
      agent = Agent.connect(runFiles(spec.runDir).agent, spec.guestEnv);
      await waitForSystemd(agent, qemu, started, timeoutMs);
      return this.machine(qemu, agent, spec);
    } catch (e) {
      return this.failed(e, qemu, agent, spec);
    }
  }

  private machine(qemu: QemuVm, agent: Agent, spec: VmSpec): Vm {
    return new QemuMachine(qemu, agent, this, liveCopySound(this.accel.accel, this.identity.build, spec.ramPadKb ?? 0));
  }

  /** A boot or restore that failed leaves no QEMU, agent connection or memory file behind. */
  private async failed(e: unknown, qemu: QemuVm | null, agent: Agent | null, spec: VmSpec): Promise<never> {
    agent?.close();
    // The boot's own error is the one to report, whatever ending QEMU says.
    await qemu?.kill().catch(() => undefined);
    rmSync(spec.ram, { force: true });
    throw e;
  }

  async restore(spec: VmSpec, from: VmImage, goOn: () => void = () => undefined): Promise<Vm> {
    let qemu: QemuVm | null = null;
    let agent: Agent | null = null;
    try {
      await ownRam(from, spec.ram, copySparse);
      goOn();
      this.give(spec.ram);
      this.give(spec.disk[0]!);
      // The state file's directory, unless it is the run directory (a hibernation's), which QEMU writes.
      const stateDir = path.dirname(from.state);
      qemu = await QemuVm.launch({ ...this.launchSpec(spec, stateDir === spec.runDir ? [] : [stateDir]), incoming: from.state });
      goOn();
      await qemu.loadState(from.state);
      goOn();
      await qemu.cont();
      await this.bridges(qemu, spec);
      goOn();
      agent = Agent.connect(runFiles(spec.runDir).agent, spec.guestEnv);
      await agent.settle();
      return this.machine(qemu, agent, spec);
    } catch (e) {
      return this.failed(e, qemu, agent, spec);
    }
  }

  /** Unmounts the RAM directory (every QEMU must have ended). */
  async close(): Promise<void> {
    await unmountRam(this.o.layout.ramDir);
  }

  /**
   * QEMU's launch: its RAM file, run directory and the directory of the disk's writable top are
   * writable to it; the frozen part of the chain (templates, other machines' frozen layers) and
   * `readable` are read-only.
   */
  private launchSpec(spec: VmSpec, readable: string[]): LaunchSpec {
    const top = path.dirname(spec.disk[0]!);
    const chain = spec.disk.map((d) => path.dirname(d)).filter((d) => d !== top);
    return {
      egress: { forward: this.o.forward(), socket: spec.egress ?? path.join(spec.runDir, 'no-egress.sock') },
      assets: this.assets, accel: this.accel.accel, memoryMb: spec.memoryMb, ramPadKb: spec.ramPadKb, cpus: spec.cpus, ram: spec.ram, disk: spec.disk[0]!,
      runDir: spec.runDir, writable: [...new Set([top, spec.runDir, spec.ram])], readable: [...new Set([...chain, ...readable])], userns: this.uid !== 0,
      ports: spec.ports.map((p) => p.port), cgroup: this.cgroup(spec.memoryMb, spec.cpus), runtime: this.o.runtime,
    };
  }

  /** The agent's socket and the ports' sockets, bridged into QEMU's network namespace. */
  private async bridges(qemu: QemuVm, spec: VmSpec): Promise<void> {
    await qemu.bridge(runFiles(spec.runDir).agent, AGENT_PORT);
    for (const p of spec.ports) await qemu.bridge(p.socket, p.port);
  }
}

/** Polls the agent until `systemctl is-system-running --wait` answers running (or degraded). */
async function waitForSystemd(agent: Agent, vm: QemuVm, started: number, timeoutMs: number): Promise<void> {
  let exited = false;
  void vm.exited.then(() => { exited = true; });
  for (;;) {
    if (exited) throw new Error(`QEMU exited during the boot: ${await vm.exited}`);
    if (Date.now() - started > timeoutMs) throw new Error(`systemd was not up after ${timeoutMs / 1000} s`);
    try {
      const r = await agent.run({ argv: ['systemctl', 'is-system-running', '--wait'], timeoutMs, outputBytes: 4096 });
      const said = r.stdout.toString().trim();
      if (said === 'running' || said === 'degraded') return;
      throw new Error(`systemd says ${said || r.stderr.toString().trim()}`);
    } catch (e) {
      if (!/agent|closed|ECONN/.test((e as Error).message)) throw e;
      await new Promise((r) => setTimeout(r, 500)); // the agent is not listening yet
    }
  }
}

async function unmountRam(dir: string): Promise<void> {
  const mounted = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === dir);
  if (mounted) {
    const r = await run('umount', [dir]);
    if (r.code !== 0) await runOk('umount', ['-l', dir]);
  }
  for (const f of readdirSync(dir)) rmSync(path.join(dir, f), { force: true });
}

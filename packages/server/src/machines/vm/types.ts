import type { Snapshotter } from '../../store/snapshotter/types.js';
import type { Agent } from './agent.js';

/**
 * The VM backend: what machines/ needs of the virtual machines it runs. Everything else in
 * machines/ (runs, the pool, storage) reaches VMs only through it. Vocabulary:
 *
 * - A **disk chain** is a list of disk files, writable top first, each backed by the next. Every
 *   file below the top is **frozen** (never written again: forks, snapshots and templates share
 *   them); `overlay` makes a new top over a frozen file. The files' format is the backend's.
 * - A **memory file** is a VM's RAM as a file on the host. A running VM has its own (named by the
 *   caller, made by `boot` or `restore`, removed when the VM ends); `save` writes a copy.
 * - A **state file** is a VM's device state, saved without its RAM. A memory file and a state
 *   file saved at one instant, over the disk chain frozen at that instant, restore the VM as it
 *   was: its processes, its memory-only files (`/run`), its clock (settled to now on restore).
 * - A VM is **running** or **paused** (its CPUs stopped: nothing in the guest moves, commands
 *   sent to it wait); it **ends** when asked (`quit`, `kill`) or on its own (the guest powered
 *   off, the process died): `exited` says why.
 * - The **guest agent** runs commands in the guest (util/spawner.ts frames: starts with
 *   streaming output, signals, a process table): `Vm.agent`. Operations on the guest's own
 *   system (its files, its root file system, its record of its base) are `Vm.guest`'s.
 * - The **identity** (build, machine type, accelerator) is what a saved state is tied to: it
 *   restores only under the same one, and only into RAM of the size it was saved with.
 *
 * Backends: QEMU (vm/qemu-backend.ts), in memory (vm/memory/, the fast tier's); suite
 * test/conformance/vm-backend.ts.
 */
export interface VmBackend {
  /** `qemu`, `memory`. */
  readonly kind: string;
  readonly identity: VmIdentity;
  /** The accelerator and why it was chosen (healthz). */
  readonly accel: { accel: string; reason: string };
  /** The host uid VM processes run as: files they write must be its (MachineHost.give). */
  readonly uid: number;
  /** Guest ports the backend uses itself (the agent's): no machine exposes them. */
  readonly reservedPorts: readonly number[];
  /** Whether guests reach anything outside (through an egress session's socket: `VmSpec.egress`). */
  readonly networked: boolean;
  /** KiB of RAM past their MiB this host's VMs get (templates record it; a state restores only into RAM of its size). */
  readonly ramPadKb: number;
  /**
   * What a boot depends on besides the disk's layers and the VM's size (kernel, guest agent, the
   * identity): part of a template's key, in this order.
   */
  readonly bootKey: Readonly<Record<string, unknown>>;

  /**
   * Makes a bootable base disk at `out` from `layers` (bottom first) with `above` (host
   * directories in overlay format, top first) stacked on them and the backend's own guest files
   * on top; `staging` is a directory of the machines' it may work in.
   */
  buildDisk(o: { snapshotter: Snapshotter; layers: readonly string[]; above: readonly string[]; out: string; staging: string }): Promise<void>;
  /**
   * A new top at `file` over `backing` (a frozen file), writable by the VMs. A relative `backing`
   * is resolved from `file`'s directory (`cwd`: where it must exist now, default that directory).
   */
  overlay(backing: string, file: string, cwd?: string): Promise<void>;
  /** Boots a fresh VM from its disk chain; resolves once its guest is up and its agent answers (or throws within `timeoutMs`). */
  boot(spec: VmSpec, timeoutMs: number): Promise<Vm>;
  /**
   * Restores a VM from saved memory and state over its disk chain: its CPUs run, its agent answers
   * and its guest is settled (clock to now, fresh entropy). `goOn` is called between the steps and
   * may throw to stop there. On failure nothing of the VM is left (no process, no memory file).
   */
  restore(spec: VmSpec, from: VmImage, goOn?: () => void): Promise<Vm>;
  /** Every VM must have ended. */
  close(): Promise<void>;
}

export interface VmIdentity {
  /** The emulator's build (QEMU's version line). */
  build: string;
  machineType: string;
  accel: string;
}

/** What a VM is launched as. */
export interface VmSpec {
  memoryMb: number;
  /** KiB past `memoryMb` (VmBackend.ramPadKb as its template had it). */
  ramPadKb?: number;
  cpus: number;
  /** Its memory file (made here; removed when the VM ends). */
  ram: string;
  /** Its disk chain, writable top first. */
  disk: readonly string[];
  /** Its run directory: sockets, the console log (`console.log`, appended to across restores). */
  runDir: string;
  /** Guest ports reached from the host, each through a Unix socket there. */
  ports: readonly VmPort[];
  /** Variables every command its agent runs gets, under the command's own. */
  guestEnv?: Record<string, string>;
  /** The socket of the egress session that is the guest's one way out; null: none (nothing leaves). */
  egress: string | null;
}

export interface VmPort {
  port: number;
  socket: string;
}

/** Saved memory and device state to restore from. */
export interface VmImage {
  ram: string;
  state: string;
  /** The memory file is a throw-away copy the VM may take (a rename, not a copy). */
  takeRam?: boolean;
  /** With `takeRam`: the file is taken once this settles (other VMs restored at once still copy it). */
  takeAfter?: Promise<unknown>;
  /** Called once this VM has its own copy of the memory file, or failed before it had one. */
  ramCopied?: () => void;
}

/** One running (or paused) VM. */
export interface Vm {
  /** False once it ended. */
  readonly alive: boolean;
  /** Resolves once it ended, with why. */
  readonly exited: Promise<string>;
  /** Set when it ended because it was asked to (`quit`, `kill`). */
  readonly exitedOnPurpose: boolean;
  /** The guest agent (one connection per VM: a restored copy has its own). */
  readonly agent: Agent;
  /** The guest's own system: files, root file system, the record of its base. */
  readonly guest: GuestOps;
  /** CPU time it used (ms). */
  cpuMs(): number;
  /** MiB of its memory file in use. */
  usedMiB(): number;
  pause(): Promise<void>;
  resume(): Promise<void>;
  /** Memory and device state into `into` (while paused): what `restore` takes. */
  save(into: { ram: string; state: string }): Promise<void>;
  /** Freezes the disk at this instant (while paused): `overlay`, a new top over the current one, takes the writes from now on. */
  snapshotDisk(overlay: string): Promise<void>;
  /** Grows the disk's virtual size to `bytes` (its top; the guest is told its capacity changed). */
  resizeDisk(bytes: number): Promise<void>;
  /** Reaches guest `port` from the host through `socket` from now on. */
  expose(port: number, socket: string): Promise<void>;
  /**
   * Copies memory and device state into `o.ram` and `o.state` while the guest runs, pausing it
   * only for the last of it; the disk is frozen at that pause. Resolves with the pause (ms).
   * Throws LiveCopyError when the copy did not finish: the VM runs on (with `o.next` as its
   * top if `o.switched` ran). Only backends that can offer it.
   */
  copyLive?(o: LiveCopyOptions): Promise<number>;
  /** With `copyLive`: whether its copy is sound here (every page the guest writes meanwhile is tracked). */
  readonly liveCopySound?: boolean;
  /** Ends it now (its disk is as the guest left it). */
  quit(): Promise<void>;
  /** Ends it at once. */
  kill(): Promise<void>;
}

export interface LiveCopyOptions {
  /** A work directory of its own (made and removed by the copy). */
  dir: string;
  ram: string;
  state: string;
  /** The disk chain as it stands (frozen at the switch), and the new top made over it. */
  frozen: readonly string[];
  next: string;
  /** Runs while the VM is stopped at the switch, once `next` is its top. */
  switched(): void | Promise<void>;
  /** Runs once the VM runs again. */
  resumed(): Promise<void>;
}

/** A live copy that did not finish (the VM runs on; a stopped copy can be made instead). */
export class LiveCopyError extends Error {}

/** A guest operation the guest refused or failed: `message` says why, in the guest's words. */
export class GuestError extends Error {}

/** What a read of a guest path found. */
export type GuestRead =
  | { kind: 'file'; data: Buffer; truncated: boolean }
  | { kind: 'dir'; entries: string[] }
  | { kind: 'missing' };

/** Operations on a running guest's own system (failures throw GuestError). */
export interface GuestOps {
  /** A file's bytes (at most `maxBytes`), or a directory's entries (`/` after subdirectories). */
  read(path: string, maxBytes: number): Promise<GuestRead>;
  /** Writes a file as root with `mode`, its parents made. */
  write(path: string, data: Buffer, mode: number): Promise<void>;
  /** After `Vm.resizeDisk`: waits until the guest sees `sectors`, then grows its root file system. */
  growRoot(sectors: number): Promise<void>;
  /** In a template's guest before it is saved: records the disk's paths and the time, for `changes`. */
  recordBase(): Promise<void>;
  /**
   * What changed on the disk since `recordBase`, as the input of a commit's apply step
   * (machines/storage/commit.ts): the deleted paths' list length on a line, the NUL-separated
   * list, then a tar of what is new or changed. At most `maxBytes`; paths below `skip` (its
   * mounts') are left out.
   */
  changes(maxBytes: number, skip?: readonly string[]): Promise<{ data: Buffer; truncated: boolean }>;
}

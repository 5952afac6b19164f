import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { MACHINE_ROOT } from '../util/idmap.js';
import type { HostPrograms, Cgroup } from '../runtime/index.js';
import { runOk, run } from '../util/proc.js';
import { chooseAccel, type AccelChoice } from './vm/accel.js';
import type { MachineAssets } from './vm/assets.js';
import { guestLayer } from './storage/disk.js';
import { AGENT_PORT, type Accel } from './vm/qemu.js';
import { MachineLayout } from './layout.js';

/**
 * QEMU runs as host uid 165536 (root of a user namespace that maps only it) under TCG; under KVM
 * it stays host root without capabilities, since /dev/kvm is root's (docs/security.md, threat 15).
 */
const QEMU_UID = MACHINE_ROOT;

/** What QEMU itself may use beyond the guest's RAM (TCG's code cache, device buffers, threads). */
const QEMU_OVERHEAD_MB = 768;

/**
 * What every machine on this host shares: the assets, the accelerator, the
 * guest layer, and the RAM directory, a tmpfs of the machines' budget at
 * `$SHELLBASE_HOME/machines/ram` whose files QEMU maps as guest memory (a
 * fork copies one file). Its contents do not survive the server: a running
 * machine is hibernated to disk when the server stops, and is stopped by a crash.
 */
export class MachineHost {
  readonly agentPort = AGENT_PORT;
  readonly guest: { dir: string; hash: string };
  /** The host uid QEMU runs as: what it writes must be this uid's. */
  readonly uid: number;

  private constructor(
    readonly assets: MachineAssets,
    readonly accel: AccelChoice,
    readonly layout: MachineLayout,
    readonly runtime: HostPrograms,
    guest: { dir: string; hash: string },
    /** sbx-forward, which QEMU's guestfwd runs to hand a guest's connection to its egress session. */
    readonly forward: string,
  ) {
    this.guest = guest;
    this.uid = accel.accel === 'tcg' ? QEMU_UID : 0;
  }

  /** Hands a file or directory QEMU writes to the uid QEMU runs as. */
  give(file: string): void {
    if (this.uid !== 0) chownSync(file, this.uid, this.uid);
  }

  static async open(o: { home: string; cache: string; assets: MachineAssets; accel: 'auto' | Accel; budgetMb: number; runtime: HostPrograms; forward: string }): Promise<MachineHost> {
    const layout = new MachineLayout(o.home, o.cache);
    const accel = await chooseAccel(layout, o.assets, o.accel);
    const guest = guestLayer(layout);
    const { root, ramDir } = layout;
    // Passable (not listable) by the sandboxes' root: disks are made from `build/` (machines/storage/disk.ts).
    mkdirSync(root, { recursive: true, mode: 0o711 });
    chmodSync(root, 0o711);
    // Passable by QEMU's uid (which owns the RAM files in it), not listable.
    mkdirSync(ramDir, { recursive: true, mode: 0o711 });
    await unmountRam(ramDir); // a crashed server's RAM files are gone with its machines
    await runOk('mount', ['-t', 'tmpfs', '-o', `size=${o.budgetMb + 256}m,mode=0711`, 'shellbase-ram', ramDir]);
    return new MachineHost(o.assets, accel, layout, o.runtime, guest, o.forward);
  }

  /** A tenant's machine files: `disks/` (qcow2 chains), `snapshots/`, `templates/` (of its versions). */
  tenantDir(tenantId: string): string {
    const d = this.layout.tenantDir(tenantId);
    // Passable by QEMU's uid, which reads the frozen parts of disk chains and snapshots' state in it.
    mkdirSync(d, { recursive: true, mode: 0o711 });
    chmodSync(d, 0o711);
    return d;
  }

  disksDir(tenantId: string): string {
    this.tenantDir(tenantId);
    const d = this.layout.disksDir(tenantId);
    mkdirSync(d, { recursive: true, mode: 0o711 });
    chmodSync(d, 0o711);
    return d;
  }

  /** One machine's sockets (short paths: Unix sockets allow 107 bytes), console log, hibernation files. */
  runDir(machineId: string): string {
    const d = this.layout.runDir(machineId);
    if (!existsSync(d)) {
      mkdirSync(path.dirname(d), { recursive: true, mode: 0o711 });
      mkdirSync(d, { mode: 0o700 });
      this.give(d);
    }
    return d;
  }

  /** The cgroup of one QEMU process. */
  cgroup(memoryMb: number, cpus: number): Cgroup {
    return this.runtime.cgroup({ memoryMb: memoryMb + QEMU_OVERHEAD_MB, pids: 512, cpus });
  }

  get ramDir(): string { return this.layout.ramDir; }

  /** Unmounts the RAM directory (every QEMU must have ended). */
  async close(): Promise<void> {
    await unmountRam(this.layout.ramDir);
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

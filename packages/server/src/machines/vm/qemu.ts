import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { innerPid, type Bridge, type Cgroup, type HostPrograms } from '../../runtime/index.js';
import { runOk } from '../../util/proc.js';
import type { Spawned } from '../../util/spawner.js';
import { HTTP_PROXY_PORT, SOCKS_PORT } from '../../net/egress.js';
import type { MachineAssets } from './assets.js';
import { Qmp, QmpError } from './qmp.js';
import { runFiles } from '../layout.js';

/** The guest agent's port (the guest side of `hostfwd`, and inside QEMU's network namespace). */
export const AGENT_PORT = 7000;
export type Accel = 'kvm' | 'tcg';
/** Where a guest finds the egress proxy (an address of QEMU's user network that only guestfwd answers). */
export const GUEST_PROXY = '10.0.2.100';

/** `-M microvm`: no PCI, no firmware tables to speak of, virtio over MMIO. Part of every snapshot's identity. */
export const MACHINE_TYPE = 'microvm';

/**
 * TCG's translation cache, in MiB. Full, it is flushed and every guest instruction run again is
 * translated again: a desktop's Chromium starting filled 128 MiB 21 times, and with its page
 * animating flushed it every ~10 s (a click took 2-3 s to show); with 512 it fills 2-3 times while
 * the session and browser start, then not again. Code is written into it as translated, so a
 * small guest uses little of it. Within QEMU_OVERHEAD_MB (qemu-backend.ts).
 */
export const TCG_CODE_CACHE_MB = 512;

let build: string | null = null;
/** This host's QEMU build (`qemu-system-x86_64 --version`): a snapshot restores only on the same one. */
export async function qemuBuild(): Promise<string> {
  build ??= (await runOk('qemu-system-x86_64', ['--version'])).toString().split('\n')[0].trim();
  return build;
}

/** The host's TSC in kHz: told to the guest so its clock needs no calibration against a (slow, emulated) PIT. */
function tscKhz(): number | null {
  const m = /cpu MHz\s*:\s*([\d.]+)/.exec(readFileSync('/proc/cpuinfo', 'utf8'));
  return m ? Math.round(Number(m[1]) * 1000) : null;
}

export interface LaunchSpec {
  assets: MachineAssets;
  accel: Accel;
  memoryMb: number;
  /** KiB of RAM past `memoryMb` (machines/vm/live-copy.ts `ramPadKb`); a saved state restores only into RAM of its size. */
  ramPadKb?: number;
  cpus: number;
  /** The machine's RAM: a file in the RAM directory (tmpfs), mapped shared so it can be copied for forks. */
  ram: string;
  /** The writable top of the disk's qcow2 chain. */
  disk: string;
  /** Where QMP's socket, the console log and the bridges' sockets go. */
  runDir: string;
  /** Visible read-write inside QEMU's confinement (the tenant's machine files, the RAM file). */
  writable: string[];
  /** Visible read-only (assets, templates that back the disk, the state file to restore). */
  readable: string[];
  /** Guest ports forwarded from 127.0.0.1 inside QEMU's network namespace. */
  ports: number[];
  /** Restore device state from this file (written by `saveState`) instead of booting. */
  incoming?: string;
  /** With `incoming`: stay paused whatever the state says (`-S`); a live copy's receiver never runs its guest. */
  paused?: boolean;
  cgroup?: Cgroup;
  /** Starts QEMU confined, and its port bridges. */
  runtime: HostPrograms;
  /**
   * The guest's one way out: connections to 10.0.2.100:3128 and :1080 run `forward --hand-stdin
   * socket` (QEMU's guestfwd, per connection), which hands them to the machine's egress session.
   * Every launch names both ports (a saved device state lists them; a socket that does not exist
   * closes each connection at once: egress "none").
   */
  egress: { forward: string; socket: string };
  /** Kernel command line additions (the accelerator probe). */
  append?: string;
  /** Run as root of a user namespace that maps only host uid 165536 (util/idmap.ts), not as host root. */
  userns?: boolean;
}

/** The guest's RAM: `memoryMb` MiB and the spec's pad (machines/vm/live-copy.ts `ramPadKb`). */
const ramSize = (spec: LaunchSpec) => (spec.ramPadKb ? `${spec.memoryMb * 1024 + spec.ramPadKb}K` : `${spec.memoryMb}M`);

export function qemuArgs(spec: LaunchSpec): string[] {
  const khz = tscKhz();
  const append = ['console=ttyS0', 'panic=-1', 'quiet', ...(khz ? [`tsc_early_khz=${khz}`, 'tsc=reliable'] : []), spec.append ?? ''].filter(Boolean).join(' ');
  const fwd = [
    ...[AGENT_PORT, ...spec.ports].map((p) => `hostfwd=tcp:127.0.0.1:${p}-:${p}`),
    ...[HTTP_PROXY_PORT, SOCKS_PORT].map((p) => `guestfwd=tcp:${GUEST_PROXY}:${p}-cmd:${spec.egress.forward} --hand-stdin ${spec.egress.socket}`),
  ].join(',');
  return [
    '-M', `${MACHINE_TYPE},memory-backend=mem`,
    '-object', `memory-backend-file,id=mem,size=${ramSize(spec)},mem-path=${spec.ram},share=on`,
    '-accel', spec.accel === 'kvm' ? 'kvm' : `tcg,tb-size=${TCG_CODE_CACHE_MB}`,
    '-cpu', spec.accel === 'kvm' ? 'host' : 'max',
    '-m', ramSize(spec), '-smp', String(spec.cpus),
    '-nodefaults', '-no-user-config', '-nographic', '-no-reboot',
    '-chardev', `file,id=con,path=${runFiles(spec.runDir).console},append=on`, '-serial', 'chardev:con',
    '-kernel', spec.assets.vmlinux, '-initrd', spec.assets.initrd, '-append', append,
    '-blockdev', `driver=qcow2,node-name=disk,file.driver=file,file.filename=${spec.disk}`,
    '-device', 'virtio-blk-device,drive=disk',
    // restrict=on: the guest reaches nothing (no host, no internet) but the egress proxy; only the forwards reach it.
    '-netdev', `user,id=net,restrict=on,${fwd}`, '-device', 'virtio-net-device,netdev=net',
    '-device', 'virtio-rng-device',
    '-qmp', `unix:${runFiles(spec.runDir).qmp},server=on,wait=off`,
    ...(spec.incoming ? ['-incoming', 'defer'] : []),
    ...(spec.paused ? ['-S'] : []),
  ];
}

/** One running QEMU process and its QMP connection. */
export class QemuVm {
  private readonly bridges: Bridge[] = [];

  /** False once the process ended. */
  alive = true;

  private constructor(readonly spec: LaunchSpec, private readonly proc: Spawned, readonly qmp: Qmp, readonly netnsPid: number, readonly exited: Promise<string>) {
    // However it ends (asked to, killed, or the guest powered off): bridges down, cgroup released.
    void exited.then(() => { this.alive = false; return this.cleanup(); });
  }

  private cleaned: Promise<void> | null = null;
  private cleanup(): Promise<void> {
    this.cleaned ??= (async () => {
      this.qmp.close();
      for (const b of this.bridges.splice(0)) b.kill();
      await this.spec.cgroup?.release().catch(() => undefined);
    })();
    return this.cleaned;
  }

  static async launch(spec: LaunchSpec): Promise<QemuVm> {
    rmSync(runFiles(spec.runDir).qmp, { force: true });
    let stderr = '';
    const proc = spec.runtime.jail({
      argv: ['qemu-system-x86_64', ...qemuArgs(spec)], cgroup: spec.cgroup, userns: spec.userns,
      devices: spec.accel === 'kvm' ? ['/dev/kvm'] : [], readable: [spec.assets.dir, path.dirname(spec.egress.forward), ...spec.readable],
      writable: [path.dirname(spec.egress.socket), ...spec.writable],
    }, { onStderr: (c) => { stderr = (stderr + c.toString()).slice(-4000); } });
    const exited = proc.exited.then((e) => stderr.trim() || `QEMU exited (${e.signal ?? `code ${e.code}`})`, (e: Error) => e.message);
    try {
      const qmp = await Promise.race([
        Qmp.connect(runFiles(spec.runDir).qmp, 30_000),
        exited.then((why) => { throw new Error(why); }),
      ]);
      const ns = await innerPid(proc.pid);
      const vm = new QemuVm(spec, proc, qmp, ns, exited);
      await vm.setCapabilities({ 'x-ignore-shared': true });
      return vm;
    } catch (e) {
      proc.kill();
      await proc.exited.catch(() => undefined);
      await spec.cgroup?.release().catch(() => undefined);
      throw e;
    }
  }

  /** Set once the server ended QEMU itself (quit or kill), so its exit is no surprise. */
  exitedOnPurpose = false;

  cpuMs(): number { return this.spec.cgroup?.stats().cpuMs ?? 0; }

  stop(): Promise<unknown> { return this.qmp.execute('stop'); }
  cont(): Promise<unknown> { return this.qmp.execute('cont'); }

  /** Sets migration capabilities (only while no migration runs). */
  setCapabilities(caps: Record<string, boolean>): Promise<unknown> {
    return this.qmp.execute('migrate-set-capabilities', { capabilities: Object.entries(caps).map(([capability, state]) => ({ capability, state })) });
  }

  /** Writes device state (RAM stays in the shared file: x-ignore-shared) while the VM is stopped. */
  async saveState(file: string): Promise<void> {
    // As every save needs them, whatever a live copy (machines/vm/live-copy.ts) left set.
    await this.setCapabilities({ 'x-ignore-shared': true, 'pause-before-switchover': false });
    await this.qmp.execute('migrate', { uri: `exec:cat > ${shellQuote(file)}` });
    await this.migration();
  }

  /** Restores device state from `file` (the VM was launched with `incoming`); the VM stays paused. */
  async loadState(file: string): Promise<void> {
    await this.qmp.execute('migrate-incoming', { uri: `exec:cat ${shellQuote(file)}` });
    await this.migration();
  }

  /** Waits for this QEMU's migration (outgoing or incoming) to complete; a failed one throws. */
  async migration(): Promise<void> {
    for (let i = 0; ; i++) {
      const r = await this.qmp.execute<{ status?: string; 'error-desc'?: string }>('query-migrate');
      if (r.status === 'completed') return;
      if (r.status === 'failed' || r.status === 'cancelled') throw new QmpError(`migration ${r.status}: ${r['error-desc'] ?? 'no reason given'}`);
      await new Promise((res) => setTimeout(res, i < 20 ? 2 : 10));
    }
  }

  private node = 'disk';

  /**
   * Freezes the disk at this instant: `overlay` (a new qcow2 file backed by
   * the current top, made by the caller) takes the writes from now on, and
   * the current top becomes read-only. Call while stopped.
   */
  async snapshotDisk(overlay: string): Promise<void> {
    await this.useOverlay(await this.openOverlay(overlay));
  }

  /** Opens `overlay` as a node of its own, not in use yet (`useOverlay` puts it on top; `dropOverlay` closes it). */
  async openOverlay(overlay: string): Promise<string> {
    const node = `disk${(this.nodes++).toString(36)}${Date.now().toString(36)}`;
    await this.qmp.execute('blockdev-add', { driver: 'qcow2', 'node-name': node, file: { driver: 'file', filename: overlay }, backing: null });
    return node;
  }

  /** Puts an opened overlay on top of the disk: the disk as it stands is frozen below it. Call while stopped. */
  async useOverlay(node: string): Promise<void> {
    await this.qmp.execute('blockdev-snapshot', { node: this.node, overlay: node });
    this.node = node;
  }

  dropOverlay(node: string): Promise<unknown> { return this.qmp.execute('blockdev-del', { 'node-name': node }); }

  private nodes = 0;

  /**
   * Grows the disk's virtual size to `bytes` (its top file; the frozen files below stay as they
   * are, reads past their end are zeros). The guest's virtio driver is told its capacity changed.
   */
  async resizeDisk(bytes: number): Promise<void> {
    await this.qmp.execute('block_resize', { 'node-name': this.node, size: bytes });
  }

  /** Forwards guest `port` from 127.0.0.1 in QEMU's network namespace (a running VM; restores get it on the command line). */
  async forward(port: number): Promise<void> {
    const out = await this.qmp.human(`hostfwd_add net tcp:127.0.0.1:${port}-:${port}`);
    if (out.trim()) throw new QmpError(out.trim());
  }

  /** A Unix socket on the host that reaches `port` on 127.0.0.1 inside QEMU's network namespace. */
  async bridge(socketPath: string, port: number): Promise<void> {
    rmSync(socketPath, { force: true });
    this.bridges.push(this.spec.runtime.bridge({ netnsPid: this.netnsPid, socketPath, target: `TCP4:127.0.0.1:${port}` }));
    for (let i = 0; !existsSync(socketPath); i++) {
      if (i > 400) throw new Error(`the bridge to port ${port} did not start`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** Ends QEMU now (the disk file is consistent with what the guest flushed). */
  async quit(): Promise<void> {
    this.exitedOnPurpose = true;
    await this.qmp.execute('quit').catch(() => undefined);
    await this.end();
  }

  async kill(): Promise<void> {
    this.exitedOnPurpose = true;
    this.proc.kill();
    await this.end();
  }

  private async end(): Promise<void> {
    const timer = setTimeout(() => this.proc.kill(), 10_000);
    await this.exited;
    clearTimeout(timer);
    await this.cleanup();
  }

}

/** `s` as one word of a POSIX shell command line. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

import { renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { copySparse } from '../storage/disk.js';
import { runFiles } from '../layout.js';
import type { Agent } from './agent.js';
import { copyLive, usedMiB, type LiveCopyHost } from './live-copy.js';
import type { QemuVm } from './qemu.js';
import { ShellGuest } from './shell-guest.js';
import { LiveCopyError, type GuestOps, type LiveCopyOptions, type Vm } from './types.js';

/**
 * One QEMU process as a VM of the backend (vm/qemu-backend.ts): its QMP connection, its guest
 * agent and the bridges of its ports. Its RAM is the memory file QEMU maps shared, so a save
 * copies that file; it goes when QEMU ends, however it ends.
 */
export class QemuMachine implements Vm {
  readonly guest: GuestOps;
  private readonly ended: Promise<void>;

  /** `liveCopySound`: machines/vm/live-copy.ts `liveCopySound` for this VM's accelerator, QEMU build and RAM pad. */
  constructor(private readonly qemu: QemuVm, readonly agent: Agent, private readonly host: LiveCopyHost, readonly liveCopySound: boolean) {
    this.guest = new ShellGuest(agent);
    this.ended = qemu.exited.then(() => this.cleanup());
  }

  get alive(): boolean { return this.qemu.alive; }
  get exited(): Promise<string> { return this.qemu.exited; }
  get exitedOnPurpose(): boolean { return this.qemu.exitedOnPurpose; }
  private get ram(): string { return this.qemu.spec.ram; }

  cpuMs(): number { return this.qemu.cpuMs(); }
  usedMiB(): number { return usedMiB(this.ram); }
  async pause(): Promise<void> { await this.qemu.stop(); }
  async resume(): Promise<void> { await this.qemu.cont(); }

  /**
   * Device state into the run directory (QEMU writes only there), then moved; at the same time the
   * RAM file copied without its holes and zero pages (a RAM file a live copy read whole holds zero
   * pages as data). Neither touches the stopped guest's memory, so they run side by side.
   */
  async save(into: { ram: string; state: string }): Promise<void> {
    const state = runFiles(this.qemu.spec.runDir).frozenState;
    // Both end before this returns (the caller resumes the guest next), whichever fails.
    const done = await Promise.allSettled([
      this.qemu.saveState(state).then(() => renameSync(state, into.state)),
      copySparse(this.ram, into.ram),
    ]);
    const failed = done.find((d) => d.status === 'rejected');
    if (failed) throw failed.reason;
  }

  snapshotDisk(overlay: string): Promise<void> { return this.qemu.snapshotDisk(overlay); }
  resizeDisk(bytes: number): Promise<void> { return this.qemu.resizeDisk(bytes); }

  async expose(port: number, socket: string): Promise<void> {
    await this.qemu.forward(port);
    await this.qemu.bridge(socket, port);
  }

  /** QEMU's precopy migration to a receiving QEMU (vm/live-copy.ts); the new top is opened first and put on at the switch. */
  async copyLive(o: LiveCopyOptions): Promise<number> {
    const node = await this.qemu.openOverlay(o.next).catch((e: unknown) => { throw new LiveCopyError(`the live copy failed: ${(e as Error).message}`, { cause: e }); });
    let switched = false;
    try {
      return await copyLive(this.host, this.qemu, {
        dir: o.dir, ram: o.ram, state: o.state, top: o.frozen[0]!, readable: [...new Set(o.frozen.map((f) => path.dirname(f)))],
        atSwitchover: async () => { await this.qemu.useOverlay(node); switched = true; await o.switched(); },
        resumed: o.resumed,
      });
    } catch (e) {
      if (!switched) await this.qemu.dropOverlay(node).catch(() => undefined);
      throw e;
    }
  }

  async quit(): Promise<void> {
    this.agent.close();
    await this.qemu.quit();
    await this.ended;
  }

  async kill(): Promise<void> {
    this.agent.close();
    await this.qemu.kill();
    await this.ended;
  }

  private cleanup(): void {
    this.agent.close();
    rmSync(this.ram, { force: true });
    const files = runFiles(this.qemu.spec.runDir);
    for (const f of [files.qmp, files.agent]) rmSync(f, { force: true });
  }
}

import { chmodSync, chownSync, existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import type { MachineLayout } from './layout.js';
import type { VmBackend } from './vm/types.js';

/**
 * The host side of every machine: the VM backend (vm/types.ts) and the directories of machines'
 * files in the layout (layout.ts), made passable by the uid the backend's VMs run as.
 */
export class MachineHost {
  /** The host uid VMs run as: what they write must be this uid's. */
  readonly uid: number;

  constructor(readonly layout: MachineLayout, readonly backend: VmBackend) {
    this.uid = backend.uid;
    mkdirSync(layout.root, { recursive: true, mode: 0o711 });
    mkdirSync(layout.ramDir, { recursive: true, mode: 0o711 });
  }

  /** Hands a file or directory VMs write to the uid they run as. */
  give(file: string): void {
    if (this.uid !== (process.getuid?.() ?? 0)) chownSync(file, this.uid, this.uid);
  }

  /** A tenant's machine files: `disks/` (disk chains), `snapshots/`, `templates/` (of its versions). */
  tenantDir(tenantId: string): string {
    const d = this.layout.tenantDir(tenantId);
    // Passable by the VMs' uid, which reads the frozen parts of disk chains and snapshots' state in it.
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

  get ramDir(): string { return this.layout.ramDir; }

  /** Closes the backend (every VM must have ended). */
  async close(): Promise<void> {
    await this.backend.close();
  }
}

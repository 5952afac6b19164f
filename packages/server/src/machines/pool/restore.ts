import type { MachineSpec } from '../../store/metadata/types.js';
import type { MachineHost } from '../host.js';
import type { Vm, VmImage } from '../vm/types.js';
import type { Template } from './templates.js';

/** Where a machine is restored from: a template, a snapshot, or its own hibernation. */
export type RestoreSource = VmImage;

/** What a restore from template `tpl` reads: its RAM and device state. */
export function templateSource(tpl: Pick<Template, 'ram' | 'state'>): RestoreSource {
  return { ram: tpl.ram, state: tpl.state };
}

/** What a VM is restored as: a machine's id, tenant and the parts of its spec it is launched with. */
export interface RestoreTarget {
  id: string;
  tenantId: string;
  spec: Pick<MachineSpec, 'memoryMb' | 'ramPadKb' | 'cpus' | 'disk' | 'ports' | 'guestEnv'>;
}

/**
 * Restores machine `m` from `src` through the host's VM backend: its memory file is the machine's
 * (layout.ts `ramFile`), its sockets and console log are in its run directory, its disk's
 * writable top is `m.spec.disk[0]`, and its exposed ports are reached through their sockets. The
 * guest's way out is the egress session listening on `egressSocket` (null: none). `goOn` is
 * called between the steps and may throw to stop there. On failure nothing of the VM is left.
 */
export function restoreVm(host: MachineHost, m: RestoreTarget, src: RestoreSource, egressSocket: string | null, goOn?: () => void): Promise<Vm> {
  const { layout } = host;
  const dir = host.runDir(m.id);
  return host.backend.restore({
    memoryMb: m.spec.memoryMb, ramPadKb: m.spec.ramPadKb, cpus: m.spec.cpus, ram: layout.ramFile(m.id), disk: m.spec.disk, runDir: dir,
    ports: m.spec.ports.map((p) => ({ port: p.port, socket: layout.portSocket(dir, p.port) })), guestEnv: m.spec.guestEnv, egress: egressSocket,
  }, src, goOn);
}

import type { MachineSpec } from '../../store/metadata/types.js';
import type { MachineHost } from '../host.js';
import type { Vm, VmImage, VmSpec } from '../vm/types.js';
import { waitUntilReady } from './readiness.js';
import type { Template } from './templates.js';

/** How long a machine's boot from its disk may take (under TCG a Debian boot with systemd takes tens of seconds), and then its readiness check. */
const BOOT_TIMEOUT_MS = 300_000;
const READY_TIMEOUT_MS = 600_000;

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

/** What a VM is launched as for machine `m` (its memory file, run directory, disk, ports and way out). */
function vmSpec(host: MachineHost, m: RestoreTarget, egressSocket: string | null): VmSpec {
  const { layout } = host;
  const dir = host.runDir(m.id);
  return {
    memoryMb: m.spec.memoryMb, ramPadKb: m.spec.ramPadKb, cpus: m.spec.cpus, ram: layout.ramFile(m.id), disk: m.spec.disk, runDir: dir,
    ports: m.spec.ports.map((p) => ({ port: p.port, socket: layout.portSocket(dir, p.port) })), guestEnv: m.spec.guestEnv, egress: egressSocket,
  };
}

/**
 * Restores machine `m` from `src` through the host's VM backend: its memory file is the machine's
 * (layout.ts `ramFile`), its sockets and console log are in its run directory, its disk's
 * writable top is `m.spec.disk[0]`, and its exposed ports are reached through their sockets. The
 * guest's way out is the egress session listening on `egressSocket` (null: none). `goOn` is
 * called between the steps and may throw to stop there. On failure nothing of the VM is left.
 */
export function restoreVm(host: MachineHost, m: RestoreTarget, src: RestoreSource, egressSocket: string | null, goOn?: () => void): Promise<Vm> {
  return host.backend.restore(vmSpec(host, m, egressSocket), src, goOn);
}

/**
 * Boots machine `m` from its disk chain (a wake without memory), as `restoreVm` launches it, and
 * waits until its image's readiness check passes, as a template's boot does. On failure nothing
 * of the VM is left.
 */
export async function bootVm(host: MachineHost, m: RestoreTarget, egressSocket: string | null): Promise<Vm> {
  const vm = await host.backend.boot(vmSpec(host, m, egressSocket), BOOT_TIMEOUT_MS);
  try {
    await waitUntilReady(vm, { timeoutMs: READY_TIMEOUT_MS });
  } catch (e) {
    await vm.kill();
    throw e;
  }
  return vm;
}

import { renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { MachineSpec } from '../../store/metadata/types.js';
import { Agent } from '../vm/agent.js';
import { copySparse } from '../storage/disk.js';
import type { MachineHost } from '../host.js';
import { QemuVm } from '../vm/qemu.js';
import type { Template } from './templates.js';

/** Where a machine is restored from: a template, a snapshot, or its own hibernation. */
export interface RestoreSource {
  ram: string;
  /** The RAM file is a throw-away copy this machine may take (a rename, not a copy). */
  takeRam?: boolean;
  state: string;
  /** Directories QEMU must read (the frozen disk chain's files, the state file). */
  readable: string[];
}

/** What a restore from template `tpl` reads: its RAM and device state, in its directory. */
export function templateSource(tpl: Pick<Template, 'ram' | 'state' | 'dir'>): RestoreSource {
  return { ram: tpl.ram, state: tpl.state, readable: [tpl.dir] };
}

/** What a restored QEMU is restored as: a machine's id, tenant and the parts of its spec QEMU is launched with. */
export interface RestoreTarget {
  id: string;
  tenantId: string;
  spec: Pick<MachineSpec, 'memoryMb' | 'ramPadKb' | 'cpus' | 'disk' | 'ports' | 'guestEnv'>;
}

/** A restored QEMU whose guest answers its agent, its CPUs running. */
export interface RestoredVm {
  vm: QemuVm;
  agent: Agent;
}

/**
 * Restores machine `m` from `src`: its RAM file copied (or taken), QEMU launched confined over the
 * disk whose writable top is `m.spec.disk[0]`, the device state loaded, the CPUs run, the agent's
 * and the ports' sockets bridged, and the guest settled (clock to now, fresh entropy). The guest's
 * way out is the egress session listening on `egressSocket`. `goOn` is called between the steps
 * and may throw to stop there. On failure the process and the RAM file are gone.
 */
export async function restoreVm(host: MachineHost, m: RestoreTarget, src: RestoreSource, egressSocket: string, goOn: () => void = () => undefined): Promise<RestoredVm> {
  const { layout } = host;
  const ram = layout.ramFile(m.id);
  const dir = host.runDir(m.id);
  let vm: QemuVm | null = null;
  let agent: Agent | null = null;
  try {
    if (src.takeRam) renameSync(src.ram, ram);
    else await copySparse(src.ram, ram);
    goOn();
    host.give(ram);
    host.give(m.spec.disk[0]!);
    const disks = host.disksDir(m.tenantId);
    // The frozen part of the chain (templates, other machines' frozen layers) is read-only to this QEMU.
    const chain = m.spec.disk.map((d) => path.dirname(d)).filter((d) => d !== disks);
    vm = await QemuVm.launch({
      egress: { forward: host.forward, socket: egressSocket },
      assets: host.assets, accel: host.accel.accel, memoryMb: m.spec.memoryMb, ramPadKb: m.spec.ramPadKb, cpus: m.spec.cpus, ram, disk: m.spec.disk[0]!,
      runDir: dir, writable: [disks, dir, ram], readable: [...chain, ...src.readable], userns: host.uid !== 0,
      ports: m.spec.ports.map((p) => p.port), incoming: src.state, cgroup: host.cgroup(m.spec.memoryMb, m.spec.cpus), runtime: host.runtime,
    });
    goOn();
    await vm.loadState(src.state);
    goOn();
    await vm.cont();
    await vm.bridge(layout.agentSocket(dir), host.agentPort);
    for (const p of m.spec.ports) await vm.bridge(layout.portSocket(dir, p.port), p.port);
    goOn();
    agent = new Agent(layout.agentSocket(dir), m.spec.guestEnv);
    await agent.settle();
    return { vm, agent };
  } catch (e) {
    await vm?.kill();
    agent?.close();
    rmSync(ram, { force: true });
    throw e;
  }
}

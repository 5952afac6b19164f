import { existsSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { MachineSnapshot } from '@shellbase/protocol';
import { ShellbaseError } from '../../errors.js';
import type { MachineShape, SnapshotRow } from '../../store/metadata/types.js';
import { newId } from '../../util/ids.js';
import type { MachineHost } from '../host.js';
import type { MachineRun } from '../run.js';

/** The fields a machine and its snapshots share (and nothing else of either). */
export function shapeOf(s: MachineShape): MachineShape {
  return {
    format: s.ramPadKb ? 3 : 2, image: s.image, ...(s.context ? { context: s.context, version: s.version } : {}),
    memoryMb: s.memoryMb, ...(s.ramPadKb ? { ramPadKb: s.ramPadKb } : {}), cpus: s.cpus, diskGb: s.diskGb, idleTimeoutMs: s.idleTimeoutMs, ...(s.network ? { network: s.network } : {}),
    ...(s.guestEnv ? { guestEnv: s.guestEnv } : {}), ...(s.mounts?.length ? { mounts: s.mounts } : {}),
  };
}

export function toSnapshot(s: SnapshotRow): MachineSnapshot {
  return { id: s.id, machine: s.machineId, memoryMb: s.spec.memoryMb, cpus: s.spec.cpus, diskGb: s.spec.diskGb, createdAt: s.createdAt };
}

/**
 * Freezes a running machine into a new snapshot's files (the row is the caller's to keep):
 * `temporary` (a fork's) puts the RAM copy on the machines' RAM tmpfs, to be taken by the last copy.
 */
export async function freezeMachine(host: MachineHost, tenantId: string, run: MachineRun, temporary: boolean): Promise<SnapshotRow> {
  const sid = newId('s');
  host.tenantDir(tenantId);
  const dir = host.layout.snapshotDir(tenantId, sid);
  // Passable: the QEMU of each restored copy reads its state file here.
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  const kept = host.layout.snapshotFiles(dir);
  const ram = temporary ? host.layout.tempRam(sid) : kept.ram;
  const state = kept.state;
  let disk: string[];
  try {
    disk = await run.serial(() => run.freeze({ ram, state }));
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    rmSync(ram, { force: true });
    throw e;
  }
  const spec = run.row.spec;
  const { build, machineType, accel } = host.backend.identity;
  return {
    id: sid, tenantId, machineId: run.row.id, createdAt: new Date().toISOString(),
    spec: { ...shapeOf(spec), disk, ram, state, qemu: build, machineType, accel, ports: spec.ports.map((p) => p.port),
      ...(spec.ports.some((p) => p.access === 'key') ? { keyPorts: spec.ports.filter((p) => p.access === 'key').map((p) => p.port) } : {}) },
  };
}

/** A snapshot restores only under the VM backend's identity it was taken with (build, machine type, accelerator), and whole. */
export function checkRestorable(host: MachineHost, snap: SnapshotRow): void {
  const s = snap.spec;
  const { build, machineType, accel } = host.backend.identity;
  const here = { qemu: build, machineType, accel };
  for (const k of ['qemu', 'machineType', 'accel'] as const) {
    if (s[k] !== here[k]) {
      throw new ShellbaseError('failed_precondition', `snapshot ${snap.id} was taken with ${k} ${JSON.stringify(s[k])}; this host has ${JSON.stringify(here[k])}`, {
        details: { snapshot: snap.id, [k]: s[k] }, hint: 'restore it on a host with the same QEMU build and accelerator, or start from a context instead',
      });
    }
  }
  for (const f of [s.ram, s.state, ...s.disk]) {
    if (!existsSync(f)) throw new ShellbaseError('failed_precondition', `snapshot ${snap.id} is incomplete (${path.basename(f)} is missing)`, { hint: 'delete it and take a new one' });
  }
}

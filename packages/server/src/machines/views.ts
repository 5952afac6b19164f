import { readdirSync, statSync, type Dirent } from 'node:fs';
import path from 'node:path';
import type { Machine, MachineSnapshot } from '@shellbase/protocol';
import type { MachineRow, MachineShape, SnapshotRow } from '../store/metadata/types.js';
import { gatewayUrls } from '../util/tokens.js';

/** The fields a machine and its snapshots share (and nothing else of either). */
export function shapeOf(s: MachineShape): MachineShape {
  return {
    format: 2, image: s.image, ...(s.context ? { context: s.context, version: s.version } : {}),
    memoryMb: s.memoryMb, cpus: s.cpus, diskGb: s.diskGb, idleTimeoutMs: s.idleTimeoutMs,
  };
}

/** A machine's row as the API shows it (its ports as gateway URLs). */
export function machineView(row: MachineRow, gatewayPort: number): Machine {
  const s = row.spec;
  return {
    id: row.id, state: row.state, image: s.image, ...(s.context ? { context: s.context, version: s.version } : {}), memoryMb: s.memoryMb, cpus: s.cpus,
    diskGb: s.diskGb, idleTimeoutMs: s.idleTimeoutMs, ...(s.snapshot ? { snapshot: s.snapshot } : {}),
    ports: s.ports.map((p) => ({ port: p.port, ...gatewayUrls(gatewayPort, p.token) })), createdAt: row.createdAt,
  };
}

export function snapshotView(s: SnapshotRow): MachineSnapshot {
  return { id: s.id, machine: s.machineId, memoryMb: s.spec.memoryMb, cpus: s.spec.cpus, diskGb: s.spec.diskGb, createdAt: s.createdAt };
}

/** Bytes allocated on disk under `dir` (sparse files count what they hold). */
export function allocated(dir: string): number {
  let total = 0;
  let entries: Dirent[] = [];
  try { entries = readdirSync(dir, { withFileTypes: true }); } catch { return 0; }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) total += allocated(p);
    else if (e.isFile()) { try { total += statSync(p).blocks * 512; } catch { /* gone meanwhile */ } }
  }
  return total;
}

import type { LeaseFence, MachineRow, MachineRowState, MachineShape, MachineSpec, SnapshotRow, SnapshotSpec } from '../rows.js';
import type { MachineRepository } from '../types.js';
import type { SqlDb } from './db.js';
import { checkFence } from './fence.js';

interface MachineRecord { id: string; tenant_id: string; state: string; spec: string; created_at: string }
interface SnapshotRecord { id: string; tenant_id: string; machine_id: string; spec: string; created_at: string }

/**
 * Reads a machine's or snapshot's spec; format 1 (before disks had sizes: all were 8 GiB) is read as format 2; 3 may carry
 * `ramPadKb`. A top-level `e2b` (rows written before `extensions`) is read as `extensions.e2b`.
 */
function parse<T extends MachineShape>(what: string, text: string): T {
  const spec = JSON.parse(text) as Omit<T, 'format'> & { format: number; diskGb?: number; e2b?: unknown; extensions?: Record<string, unknown> };
  // Rows written before the extensions slot kept the E2B API's record as `e2b`: read it where it is now.
  if (spec.e2b !== undefined) {
    spec.extensions = { ...spec.extensions, e2b: spec.e2b };
    delete spec.e2b;
  }
  if (spec.format === 1) return { ...spec, format: 2, diskGb: 8 } as T;
  if (spec.format !== 2 && spec.format !== 3) throw new Error(`${what}: unknown spec format ${String(spec.format)}`);
  return spec as T;
}

const toMachine = (r: MachineRecord): MachineRow => ({
  id: r.id, tenantId: r.tenant_id, state: r.state as MachineRowState, spec: parse<MachineSpec>(`machine ${r.id}`, r.spec), createdAt: r.created_at,
});
const toSnapshot = (r: SnapshotRecord): SnapshotRow => ({
  id: r.id, tenantId: r.tenant_id, machineId: r.machine_id, spec: parse<SnapshotSpec>(`snapshot ${r.id}`, r.spec), createdAt: r.created_at,
});
const MACHINE = 'id, tenant_id, state, spec, created_at';
const SNAPSHOT = 'id, tenant_id, machine_id, spec, created_at';

/** Machines and their snapshots (their processes live in the server: machines/), and the gateway tokens of exposed ports. */
export class SqlMachines implements MachineRepository {
  constructor(private readonly db: SqlDb) {}

  async create(row: MachineRow): Promise<void> {
    await this.db.tx(async (db) => {
      await db.run(`INSERT INTO machines (${MACHINE}) VALUES (?, ?, ?, ?, ?)`, [row.id, row.tenantId, row.state, JSON.stringify(row.spec), row.createdAt]);
      await writePorts(db, row);
    });
  }

  async get(tenantId: string, id: string): Promise<MachineRow | null> {
    const r = await this.db.get<MachineRecord>(`SELECT ${MACHINE} FROM machines WHERE id = ? AND tenant_id = ?`, [id, tenantId]);
    return r ? toMachine(r) : null;
  }

  async find(id: string): Promise<MachineRow | null> {
    const r = await this.db.get<MachineRecord>(`SELECT ${MACHINE} FROM machines WHERE id = ?`, [id]);
    return r ? toMachine(r) : null;
  }

  async list(tenantId?: string): Promise<MachineRow[]> {
    const rows = tenantId === undefined
      ? await this.db.all<MachineRecord>(`SELECT ${MACHINE} FROM machines ORDER BY created_at, id`)
      : await this.db.all<MachineRecord>(`SELECT ${MACHINE} FROM machines WHERE tenant_id = ? ORDER BY created_at, id`, [tenantId]);
    return rows.map(toMachine);
  }

  async update(row: MachineRow, fence?: LeaseFence): Promise<void> {
    await this.db.tx(async (db) => {
      if (fence) await checkFence(db, fence);
      await db.run('UPDATE machines SET state = ?, spec = ? WHERE id = ?', [row.state, JSON.stringify(row.spec), row.id]);
      await writePorts(db, row);
    });
  }

  async delete(tenantId: string, id: string, fence?: LeaseFence): Promise<boolean> {
    return this.db.tx(async (db) => {
      if (fence) await checkFence(db, fence);
      await db.run('DELETE FROM machine_ports WHERE machine_id = ?', [id]);
      return (await db.run('DELETE FROM machines WHERE id = ? AND tenant_id = ?', [id, tenantId])) === 1;
    });
  }

  async byPortToken(token: string): Promise<{ machine: MachineRow; port: number } | null> {
    const r = await this.db.get<MachineRecord & { port: number }>(
      `SELECT ${MACHINE.split(', ').map((c) => `m.${c}`).join(', ')}, p.port AS port FROM machine_ports p JOIN machines m ON m.id = p.machine_id WHERE p.token = ?`, [token]);
    return r ? { machine: toMachine(r), port: Number(r.port) } : null;
  }

  async createSnapshot(row: SnapshotRow): Promise<void> {
    await this.db.run(`INSERT INTO machine_snapshots (${SNAPSHOT}) VALUES (?, ?, ?, ?, ?)`, [row.id, row.tenantId, row.machineId, JSON.stringify(row.spec), row.createdAt]);
  }

  async getSnapshot(tenantId: string, id: string): Promise<SnapshotRow | null> {
    const r = await this.db.get<SnapshotRecord>(`SELECT ${SNAPSHOT} FROM machine_snapshots WHERE id = ? AND tenant_id = ?`, [id, tenantId]);
    return r ? toSnapshot(r) : null;
  }

  async listSnapshots(tenantId?: string): Promise<SnapshotRow[]> {
    const rows = tenantId === undefined
      ? await this.db.all<SnapshotRecord>(`SELECT ${SNAPSHOT} FROM machine_snapshots ORDER BY created_at, id`)
      : await this.db.all<SnapshotRecord>(`SELECT ${SNAPSHOT} FROM machine_snapshots WHERE tenant_id = ? ORDER BY created_at, id`, [tenantId]);
    return rows.map(toSnapshot);
  }

  async deleteSnapshot(tenantId: string, id: string): Promise<boolean> {
    return (await this.db.run('DELETE FROM machine_snapshots WHERE id = ? AND tenant_id = ?', [id, tenantId])) === 1;
  }
}

async function writePorts(db: SqlDb, row: MachineRow): Promise<void> {
  await db.run('DELETE FROM machine_ports WHERE machine_id = ?', [row.id]);
  for (const p of row.spec.ports) await db.run('INSERT INTO machine_ports (token, machine_id, port) VALUES (?, ?, ?)', [p.token, row.id, p.port]);
}

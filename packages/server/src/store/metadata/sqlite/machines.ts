import type Database from 'better-sqlite3';
import type { MachineRow, MachineRowState, MachineSpec, SnapshotRow, SnapshotSpec } from '../types.js';

interface MachineRecord { id: string; tenant_id: string; state: string; spec: string; created_at: string }
interface SnapshotRecord { id: string; tenant_id: string; machine_id: string; spec: string; created_at: string }

function parse<T extends { format: number }>(what: string, text: string): T {
  const spec = JSON.parse(text) as T;
  if (spec.format !== 1) throw new Error(`${what}: unknown spec format ${String(spec.format)}`);
  return spec;
}

const toMachine = (r: MachineRecord): MachineRow => ({
  id: r.id, tenantId: r.tenant_id, state: r.state as MachineRowState, spec: parse<MachineSpec>(`machine ${r.id}`, r.spec), createdAt: r.created_at,
});
const toSnapshot = (r: SnapshotRecord): SnapshotRow => ({
  id: r.id, tenantId: r.tenant_id, machineId: r.machine_id, spec: parse<SnapshotSpec>(`snapshot ${r.id}`, r.spec), createdAt: r.created_at,
});

/** The machine tables of the SQLite store (migration 7), behind SqliteMetadataStore's methods. */
export class SqliteMachines {
  constructor(private readonly db: Database.Database, private readonly stmt: (sql: string) => Database.Statement) {}

  create(row: MachineRow): void {
    this.db.transaction(() => {
      this.stmt('INSERT INTO machines (id, tenant_id, state, spec, created_at) VALUES (?, ?, ?, ?, ?)')
        .run(row.id, row.tenantId, row.state, JSON.stringify(row.spec), row.createdAt);
      this.writePorts(row);
    })();
  }

  get(tenantId: string, id: string): MachineRow | null {
    const r = this.stmt('SELECT * FROM machines WHERE id = ? AND tenant_id = ?').get(id, tenantId) as MachineRecord | undefined;
    return r ? toMachine(r) : null;
  }

  list(tenantId?: string): MachineRow[] {
    const rows = tenantId === undefined
      ? this.stmt('SELECT * FROM machines ORDER BY created_at, id').all()
      : this.stmt('SELECT * FROM machines WHERE tenant_id = ? ORDER BY created_at, id').all(tenantId);
    return (rows as MachineRecord[]).map(toMachine);
  }

  update(row: MachineRow): void {
    this.db.transaction(() => {
      this.stmt('UPDATE machines SET state = ?, spec = ? WHERE id = ?').run(row.state, JSON.stringify(row.spec), row.id);
      this.writePorts(row);
    })();
  }

  private writePorts(row: MachineRow): void {
    this.stmt('DELETE FROM machine_ports WHERE machine_id = ?').run(row.id);
    for (const p of row.spec.ports) this.stmt('INSERT INTO machine_ports (token, machine_id, port) VALUES (?, ?, ?)').run(p.token, row.id, p.port);
  }

  delete(tenantId: string, id: string): boolean {
    return this.db.transaction(() => {
      this.stmt('DELETE FROM machine_ports WHERE machine_id = ?').run(id);
      return this.stmt('DELETE FROM machines WHERE id = ? AND tenant_id = ?').run(id, tenantId).changes === 1;
    })();
  }

  byPortToken(token: string): { machine: MachineRow; port: number } | null {
    const r = this.stmt(`SELECT m.*, p.port AS port FROM machine_ports p JOIN machines m ON m.id = p.machine_id WHERE p.token = ?`)
      .get(token) as (MachineRecord & { port: number }) | undefined;
    return r ? { machine: toMachine(r), port: r.port } : null;
  }

  createSnapshot(row: SnapshotRow): void {
    this.stmt('INSERT INTO machine_snapshots (id, tenant_id, machine_id, spec, created_at) VALUES (?, ?, ?, ?, ?)')
      .run(row.id, row.tenantId, row.machineId, JSON.stringify(row.spec), row.createdAt);
  }

  getSnapshot(tenantId: string, id: string): SnapshotRow | null {
    const r = this.stmt('SELECT * FROM machine_snapshots WHERE id = ? AND tenant_id = ?').get(id, tenantId) as SnapshotRecord | undefined;
    return r ? toSnapshot(r) : null;
  }

  listSnapshots(tenantId?: string): SnapshotRow[] {
    const rows = tenantId === undefined
      ? this.stmt('SELECT * FROM machine_snapshots ORDER BY created_at, id').all()
      : this.stmt('SELECT * FROM machine_snapshots WHERE tenant_id = ? ORDER BY created_at, id').all(tenantId);
    return (rows as SnapshotRecord[]).map(toSnapshot);
  }

  deleteSnapshot(tenantId: string, id: string): boolean {
    return this.stmt('DELETE FROM machine_snapshots WHERE id = ? AND tenant_id = ?').run(id, tenantId).changes === 1;
  }
}

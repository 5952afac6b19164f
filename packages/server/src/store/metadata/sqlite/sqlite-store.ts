import { open, type FileHandle } from 'node:fs/promises';
import Database from 'better-sqlite3';
import type { Change } from '../../snapshotter/types.js';
import type {
  UsageGrouping, ApiKeyRow, ContextRow, CommitVersionOptions, DropResult, GraphVersion, LayerRow, MachineRow, MetadataStore, NewVersion, ServiceRow, ServiceSpec,
  SnapshotRow, TenantRow, UsageRow, UsageTotals, VersionRow,
} from '../types.js';
import { SqliteMachines } from './machines.js';
import { MIGRATIONS } from './migrations.js';

interface VersionRecord {
  id: string; tenant_id: string; parent: string | null; merged: string | null; context: string | null; depth: number; layers: string;
  cause: string; bytes: number; created_at: string;
}
/** Every column of a version but its change set. */
const VERSION_COLUMNS = 'id, tenant_id, parent, merged, context, depth, layers, cause, bytes, created_at';
interface ContextRecord {
  tenant_id: string; name: string; head: string; image: string; created_at: string; updated_at: string;
}
interface ServiceRecord { tenant_id: string; context: string; name: string; token: string; spec: string; created_at: string }
const toService = (r: ServiceRecord): ServiceRow => {
  const spec = JSON.parse(r.spec) as ServiceSpec;
  if (spec.format !== 1) throw new Error(`service ${r.name}: unknown spec format ${String(spec.format)}`);
  return { tenantId: r.tenant_id, context: r.context, name: r.name, token: r.token, spec, createdAt: r.created_at };
};
interface TenantRecord { id: string; name: string; admin: number; created_at: string; quotas: string | null }

const toVersion = (r: VersionRecord): VersionRow => ({
  id: r.id, tenantId: r.tenant_id, parent: r.parent, merged: r.merged, context: r.context, depth: r.depth, layers: JSON.parse(r.layers), cause: JSON.parse(r.cause),
  bytes: r.bytes, createdAt: r.created_at,
});
const toContext = (r: ContextRecord): ContextRow => ({
  tenantId: r.tenant_id, name: r.name, head: r.head, image: r.image, createdAt: r.created_at, updatedAt: r.updated_at,
});
const toTenant = (r: TenantRecord): TenantRow => ({
  id: r.id, name: r.name, admin: r.admin === 1, createdAt: r.created_at, ...(r.quotas ? { quotas: JSON.parse(r.quotas) } : {}),
});

/** The embedded metadata store: one SQLite file in WAL mode, one connection. */
export class SqliteMetadataStore implements MetadataStore {
  private readonly db: Database.Database;

  constructor(private readonly file: string) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.pragma('foreign_keys = ON');
    this.db.pragma('busy_timeout = 5000');
    this.migrate();
    // Ids garbage collection drops, per transaction (temporary tables are per connection).
    this.db.exec('CREATE TEMP TABLE gc_drop (id TEXT PRIMARY KEY)');
    this.machines = new SqliteMachines(this.db, (sql) => this.stmt(sql));
  }

  private readonly machines: SqliteMachines;

  async createMachine(row: MachineRow): Promise<void> { this.machines.create(row); }
  async getMachine(tenantId: string, id: string): Promise<MachineRow | null> { return this.machines.get(tenantId, id); }
  async listMachines(tenantId?: string): Promise<MachineRow[]> { return this.machines.list(tenantId); }
  async updateMachine(row: MachineRow): Promise<void> { this.machines.update(row); }
  async deleteMachine(tenantId: string, id: string): Promise<boolean> { return this.machines.delete(tenantId, id); }
  async machineByPortToken(token: string): Promise<{ machine: MachineRow; port: number } | null> { return this.machines.byPortToken(token); }
  async createSnapshot(row: SnapshotRow): Promise<void> { this.machines.createSnapshot(row); }
  async getSnapshot(tenantId: string, id: string): Promise<SnapshotRow | null> { return this.machines.getSnapshot(tenantId, id); }
  async listSnapshots(tenantId?: string): Promise<SnapshotRow[]> { return this.machines.listSnapshots(tenantId); }
  async deleteSnapshot(tenantId: string, id: string): Promise<boolean> { return this.machines.deleteSnapshot(tenantId, id); }

  private readonly statements = new Map<string, Database.Statement>();

  /** A prepared statement, compiled once per SQL text. */
  private stmt(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (!st) { st = this.db.prepare(sql); this.statements.set(sql, st); }
    return st;
  }

  private migrate(): void {
    const current = this.db.pragma('user_version', { simple: true }) as number;
    if (current > MIGRATIONS.length) {
      throw new Error(`database schema ${current} is newer than this server knows (${MIGRATIONS.length})`);
    }
    for (let v = current; v < MIGRATIONS.length; v++) {
      this.db.transaction(() => {
        this.db.exec(MIGRATIONS[v]);
        this.db.pragma(`user_version = ${v + 1}`);
      })();
    }
  }

  private wal: FileHandle | null = null;

  /**
   * In WAL mode with synchronous=NORMAL a commit writes its frames to the WAL
   * without fsync (a crash keeps them, a power loss may not); syncing the WAL
   * file makes every transaction committed so far durable, for many at once.
   */
  async sync(): Promise<void> {
    if (!this.wal) {
      try { this.wal = await open(`${this.file}-wal`, 'r'); } catch { return; } // nothing written yet
    }
    await this.wal.datasync();
  }

  async close(): Promise<void> {
    await this.wal?.close();
    this.db.close();
  }

  async createTenant(t: TenantRow): Promise<boolean> {
    return this.stmt('INSERT OR IGNORE INTO tenants (id, name, admin, created_at, quotas) VALUES (?, ?, ?, ?, ?)')
      .run(t.id, t.name, t.admin ? 1 : 0, t.createdAt, t.quotas ? JSON.stringify(t.quotas) : null).changes === 1;
  }

  async listTenants(): Promise<TenantRow[]> {
    return (this.stmt('SELECT * FROM tenants ORDER BY name').all() as TenantRecord[]).map(toTenant);
  }

  async getTenant(id: string): Promise<TenantRow | null> {
    const r = this.stmt('SELECT * FROM tenants WHERE id = ?').get(id) as TenantRecord | undefined;
    return r ? toTenant(r) : null;
  }

  async addApiKey(tenantId: string, keyHash: string): Promise<void> {
    this.stmt('INSERT INTO api_keys (hash, tenant_id, created_at) VALUES (?, ?, ?)')
      .run(keyHash, tenantId, new Date().toISOString());
  }

  async tenantForKey(keyHash: string): Promise<TenantRow | null> {
    const r = this.stmt(
      'SELECT t.* FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.hash = ? AND k.revoked_at IS NULL',
    ).get(keyHash) as TenantRecord | undefined;
    return r ? toTenant(r) : null;
  }

  async adminTenant(): Promise<TenantRow | null> {
    const r = this.stmt('SELECT * FROM tenants WHERE admin = 1 ORDER BY created_at LIMIT 1').get() as TenantRecord | undefined;
    return r ? toTenant(r) : null;
  }

  async tenantByName(name: string): Promise<TenantRow | null> {
    const r = this.stmt('SELECT * FROM tenants WHERE name = ?').get(name) as TenantRecord | undefined;
    return r ? toTenant(r) : null;
  }

  async listApiKeys(tenantId: string): Promise<ApiKeyRow[]> {
    const rows = this.stmt('SELECT hash, created_at, revoked_at FROM api_keys WHERE tenant_id = ? ORDER BY created_at')
      .all(tenantId) as { hash: string; created_at: string; revoked_at: string | null }[];
    return rows.map((r) => ({ id: `k_${r.hash.slice(0, 12)}`, createdAt: r.created_at, revokedAt: r.revoked_at }));
  }

  async revokeApiKeys(tenantId: string, keyId?: string): Promise<number> {
    const now = new Date().toISOString();
    if (keyId === undefined) {
      return this.stmt('UPDATE api_keys SET revoked_at = ? WHERE tenant_id = ? AND revoked_at IS NULL').run(now, tenantId).changes;
    }
    return this.stmt('UPDATE api_keys SET revoked_at = ? WHERE tenant_id = ? AND substr(hash, 1, 12) = ? AND revoked_at IS NULL')
      .run(now, tenantId, keyId.replace(/^k_/, '')).changes;
  }

  async getContext(tenantId: string, name: string): Promise<ContextRow | null> {
    const r = this.stmt('SELECT * FROM contexts WHERE tenant_id = ? AND name = ?').get(tenantId, name) as ContextRecord | undefined;
    return r ? toContext(r) : null;
  }

  async listContexts(tenantId: string): Promise<ContextRow[]> {
    return (this.stmt('SELECT * FROM contexts WHERE tenant_id = ? ORDER BY name').all(tenantId) as ContextRecord[]).map(toContext);
  }

  async countContexts(tenantId: string): Promise<number> {
    return (this.stmt('SELECT COUNT(*) AS n FROM contexts WHERE tenant_id = ?').get(tenantId) as { n: number }).n;
  }

  async createContext(c: ContextRow): Promise<boolean> {
    const r = this.stmt(
      'INSERT OR IGNORE INTO contexts (tenant_id, name, head, image, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)',
    ).run(c.tenantId, c.name, c.head, c.image, c.createdAt, c.updatedAt);
    return r.changes === 1;
  }

  async deleteContext(tenantId: string, name: string): Promise<boolean> {
    return this.db.transaction(() => {
      if (this.stmt('DELETE FROM contexts WHERE tenant_id = ? AND name = ?').run(tenantId, name).changes !== 1) return false;
      this.stmt('UPDATE versions SET context = NULL WHERE tenant_id = ? AND context = ?').run(tenantId, name);
      this.stmt('DELETE FROM services WHERE tenant_id = ? AND context = ?').run(tenantId, name);
      return true;
    }).immediate();
  }

  async createService(s: ServiceRow): Promise<boolean> {
    return this.stmt('INSERT OR IGNORE INTO services (tenant_id, context, name, token, spec, created_at) VALUES (?, ?, ?, ?, ?, ?)')
      .run(s.tenantId, s.context, s.name, s.token, JSON.stringify(s.spec), s.createdAt).changes === 1;
  }

  async getService(tenantId: string, context: string, name: string): Promise<ServiceRow | null> {
    const r = this.stmt('SELECT * FROM services WHERE tenant_id = ? AND context = ? AND name = ?').get(tenantId, context, name) as ServiceRecord | undefined;
    return r ? toService(r) : null;
  }

  async listServices(tenantId: string, context: string): Promise<ServiceRow[]> {
    return (this.stmt('SELECT * FROM services WHERE tenant_id = ? AND context = ? ORDER BY name').all(tenantId, context) as ServiceRecord[]).map(toService);
  }

  async serviceByToken(token: string): Promise<ServiceRow | null> {
    const r = this.stmt('SELECT * FROM services WHERE token = ?').get(token) as ServiceRecord | undefined;
    return r ? toService(r) : null;
  }

  async deleteService(tenantId: string, context: string, name: string): Promise<boolean> {
    return this.stmt('DELETE FROM services WHERE tenant_id = ? AND context = ? AND name = ?').run(tenantId, context, name).changes === 1;
  }

  private insertVersion(v: NewVersion): void {
    this.stmt(
      `INSERT INTO versions (id, tenant_id, parent, merged, context, depth, layers, changes, cause, bytes, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run(v.id, v.tenantId, v.parent, v.merged ?? null, v.context ?? null, v.depth, JSON.stringify(v.layers),
      v.changes === null ? null : JSON.stringify(v.changes), JSON.stringify(v.cause), v.bytes, v.createdAt);
  }

  private insertLayer(l: LayerRow): void {
    this.stmt('INSERT OR IGNORE INTO layers (id, kind, bytes, created_at) VALUES (?, ?, ?, ?)')
      .run(l.id, l.kind, l.bytes, l.createdAt);
  }

  async commitVersion({ version, layer, moveHead }: CommitVersionOptions): Promise<boolean> {
    const headMoved = new Error('head moved');
    try {
      this.db.transaction(() => {
        if (layer) this.insertLayer(layer);
        this.insertVersion(version);
        if (!moveHead) return;
        const moved = this.stmt(
          'UPDATE contexts SET head = ?, updated_at = ? WHERE tenant_id = ? AND name = ? AND head = ?',
        ).run(version.id, version.createdAt, moveHead.tenantId, moveHead.context, moveHead.expectedHead);
        if (moved.changes !== 1) throw headMoved; // rolls the whole transaction back
      }).immediate();
      return true;
    } catch (e) {
      if (e === headMoved) return false;
      throw e;
    }
  }

  async getVersion(id: string): Promise<VersionRow | null> {
    const r = this.stmt(`SELECT ${VERSION_COLUMNS} FROM versions WHERE id = ?`).get(id) as VersionRecord | undefined;
    return r ? toVersion(r) : null;
  }

  async versionChanges(id: string): Promise<Change[] | null> {
    const r = this.stmt('SELECT changes FROM versions WHERE id = ?').get(id) as { changes: string | null } | undefined;
    return r?.changes ? (JSON.parse(r.changes) as Change[]) : null;
  }

  async lineage(id: string, limit: number): Promise<VersionRow[]> {
    const rows = this.stmt(
      `WITH RECURSIVE chain(id, n) AS (
         SELECT ?, 0
         UNION ALL
         SELECT v.parent, c.n + 1 FROM versions v JOIN chain c ON v.id = c.id
         WHERE v.parent IS NOT NULL AND c.n + 1 < ?
       )
       SELECT ${VERSION_COLUMNS.split(', ').map((c) => `v.${c}`).join(', ')} FROM chain c JOIN versions v ON v.id = c.id ORDER BY c.n`,
    ).all(id, limit) as VersionRecord[];
    return rows.map(toVersion);
  }

  async ensureImageVersion(version: NewVersion, layer: LayerRow): Promise<void> {
    this.db.transaction(() => {
      this.insertLayer(layer);
      if (!this.stmt('SELECT 1 FROM versions WHERE id = ?').get(version.id)) this.insertVersion(version);
    })();
  }

  /** Adds to `ids` every layer the versions a query selects (its `layers` column) refer to. */
  private addVersionLayers(ids: Set<string>, sql: string, ...params: unknown[]): Set<string> {
    for (const r of this.stmt(sql).all(...params) as { layers: string }[]) {
      for (const id of JSON.parse(r.layers) as string[]) ids.add(id);
    }
    return ids;
  }

  async layerIds(): Promise<Set<string>> {
    const ids = new Set<string>();
    for (const r of this.stmt('SELECT id FROM layers').all() as { id: string }[]) ids.add(r.id);
    return this.addVersionLayers(ids, 'SELECT layers FROM versions');
  }

  async recordUsage(u: UsageRow): Promise<void> {
    this.stmt(`INSERT INTO usage (tenant_id, context, kind, created_at, cpu_ms, wall_ms, memory_peak_bytes, bytes_written, exit_code)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(u.tenantId, u.context, u.kind, u.createdAt, u.cpuMs, u.wallMs,
      u.memoryPeakBytes, u.bytesWritten, u.exitCode);
  }

  async usageTotals(tenantId: string, from: string, to: string, groupBy: UsageGrouping): Promise<UsageTotals[]> {
    const column = { context: 'context', kind: 'kind', day: 'substr(created_at, 1, 10)', hour: 'substr(created_at, 1, 13)' }[groupBy];
    return this.stmt(`SELECT ${column} AS key, SUM(kind = 'query') AS queries, SUM(cpu_ms) AS cpuMs, SUM(wall_ms) AS wallMs,
        SUM(CASE WHEN kind = 'service' THEN wall_ms ELSE 0 END) / 1000.0 AS serviceSeconds,
        SUM(CASE WHEN kind = 'machine' THEN wall_ms ELSE 0 END) / 1000.0 AS machineSeconds,
        SUM(CASE WHEN kind = 'machine' THEN wall_ms / 1000.0 * memory_peak_bytes / 1048576 ELSE 0 END) AS machineMbSeconds, SUM(bytes_written) AS bytesWritten
      FROM usage WHERE tenant_id = ? AND created_at >= ? AND created_at < ? GROUP BY key ORDER BY key`)
      .all(tenantId, from, to) as UsageTotals[];
  }

  async storedBytes(tenantId: string): Promise<number> {
    const ids = this.addVersionLayers(new Set(), 'SELECT layers FROM versions WHERE tenant_id = ?', tenantId);
    return this.layerBytes([...ids]);
  }

  async layerBytes(layerIds: readonly string[]): Promise<number> {
    const bytes = this.stmt('SELECT bytes FROM layers WHERE id = ?');
    let total = 0;
    for (const id of new Set(layerIds)) total += (bytes.get(id) as { bytes: number } | undefined)?.bytes ?? 0;
    return total;
  }

  async totalLayerBytes(): Promise<number> {
    return (this.stmt('SELECT COALESCE(SUM(bytes), 0) AS n FROM layers').get() as { n: number }).n;
  }

  async versionGraph(): Promise<{ versions: GraphVersion[]; heads: string[] }> {
    return this.db.transaction(() => ({
      versions: (this.stmt(`SELECT id, tenant_id AS tenantId, parent, merged, context, created_at AS createdAt
        FROM versions WHERE parent IS NOT NULL OR depth > 0`).all() as GraphVersion[]),
      heads: (this.stmt('SELECT DISTINCT head FROM contexts').all() as { head: string }[]).map((r) => r.head),
    }))();
  }

  async dropVersions(ids: readonly string[], keepLayers: ReadonlySet<string>): Promise<DropResult> {
    return this.db.transaction(() => {
      this.stmt('DELETE FROM gc_drop').run();
      const add = this.stmt('INSERT OR IGNORE INTO gc_drop (id) VALUES (?)');
      for (const id of ids) add.run(id);
      this.stmt('DELETE FROM gc_drop WHERE id IN (SELECT head FROM contexts)').run();
      this.stmt('UPDATE versions SET parent = NULL WHERE parent IN (SELECT id FROM gc_drop)').run();
      this.stmt('UPDATE versions SET merged = NULL WHERE merged IN (SELECT id FROM gc_drop)').run();
      const versions = this.stmt('DELETE FROM versions WHERE id IN (SELECT id FROM gc_drop)').run().changes;
      this.stmt('DELETE FROM gc_drop').run();
      const referenced = this.addVersionLayers(new Set(keepLayers), 'SELECT layers FROM versions');
      const layers: LayerRow[] = [];
      const remove = this.stmt('DELETE FROM layers WHERE id = ?');
      for (const l of this.stmt(`SELECT id, kind, bytes, created_at AS createdAt FROM layers WHERE kind != 'image'`).all() as LayerRow[]) {
        if (referenced.has(l.id)) continue;
        remove.run(l.id);
        layers.push(l);
      }
      return { versions, layers };
    }).immediate();
  }

  async replaceLayerPrefix(prefix: string[], replacement: string[], layer: LayerRow): Promise<number> {
    const from = JSON.stringify(prefix).slice(0, -1);
    const to = JSON.stringify(replacement).slice(0, -1);
    return this.db.transaction(() => {
      this.insertLayer(layer);
      return this.stmt(
        `UPDATE versions SET layers = ? || substr(layers, ?)
         WHERE substr(layers, 1, ?) = ? AND substr(layers, ? + 1, 1) IN (',', ']')`,
      ).run(to, from.length + 1, from.length, from, from.length).changes;
    })();
  }
}

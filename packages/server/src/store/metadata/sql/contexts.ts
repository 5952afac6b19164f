import type { ContextConfig, ContextDefaults, NetworkPolicy } from '@shellbase/protocol';
import type { ContextChanges, ContextRow } from '../rows.js';
import type { ContextRepository } from '../types.js';
import type { Param, SqlDb } from './db.js';

interface ContextRecord {
  tenant_id: string; name: string; head: string; image: string; created_at: string; updated_at: string;
  network: string | null; defaults: string | null; config: string | null;
}

/** A JSON column with `format: 1` (null when absent). */
function fromJson<T extends object>(text: string | null, what: string): T | undefined {
  if (text === null) return undefined;
  const { format, ...rest } = JSON.parse(text) as { format: number };
  if (format !== 1) throw new Error(`context ${what}: unknown format ${String(format)}`);
  return rest as T;
}
/** NULL for nothing (an empty object included): a context either has defaults (or config) or it has none. */
const toJson = (v: object | undefined): string | null => (v === undefined || Object.keys(v).length === 0 ? null : JSON.stringify({ format: 1, ...v }));

const toContext = (r: ContextRecord): ContextRow => {
  const defaults = fromJson<ContextDefaults>(r.defaults, 'defaults');
  const config = fromJson<ContextConfig>(r.config, 'config');
  return {
    tenantId: r.tenant_id, name: r.name, head: r.head, image: r.image, createdAt: r.created_at, updatedAt: r.updated_at,
    ...(r.network ? { network: JSON.parse(r.network) as NetworkPolicy } : {}), ...(defaults ? { defaults } : {}), ...(config ? { config } : {}),
  };
};
const CONTEXT = 'tenant_id, name, head, image, created_at, updated_at, network, defaults, config';

/** Contexts: a tenant's named pointers to head versions (heads move in SqlVersions.commit, and in `update` for builds). */
export class SqlContexts implements ContextRepository {
  constructor(private readonly db: SqlDb) {}

  async get(tenantId: string, name: string): Promise<ContextRow | null> {
    const r = await this.db.get<ContextRecord>(`SELECT ${CONTEXT} FROM contexts WHERE tenant_id = ? AND name = ?`, [tenantId, name]);
    return r ? toContext(r) : null;
  }

  async list(tenantId: string): Promise<ContextRow[]> {
    return (await this.db.all<ContextRecord>(`SELECT ${CONTEXT} FROM contexts WHERE tenant_id = ? ORDER BY name`, [tenantId])).map(toContext);
  }

  async count(tenantId: string): Promise<number> {
    return Number((await this.db.get<{ n: number }>('SELECT COUNT(*) AS n FROM contexts WHERE tenant_id = ?', [tenantId]))!.n);
  }

  async create(c: ContextRow): Promise<boolean> {
    return (await this.db.run(
      `INSERT INTO contexts (${CONTEXT}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
      [c.tenantId, c.name, c.head, c.image, c.createdAt, c.updatedAt, c.network ? JSON.stringify(c.network) : null, toJson(c.defaults), toJson(c.config)])) === 1;
  }

  async setNetwork(tenantId: string, name: string, network: NetworkPolicy | null): Promise<boolean> {
    return (await this.db.run('UPDATE contexts SET network = ? WHERE tenant_id = ? AND name = ?', [network ? JSON.stringify(network) : null, tenantId, name])) === 1;
  }

  async delete(tenantId: string, name: string): Promise<boolean> {
    return this.db.tx(async (db) => {
      if ((await db.run('DELETE FROM contexts WHERE tenant_id = ? AND name = ?', [tenantId, name])) !== 1) return false;
      await db.run('UPDATE versions SET context = NULL WHERE tenant_id = ? AND context = ?', [tenantId, name]);
      await db.run('DELETE FROM services WHERE tenant_id = ? AND context = ?', [tenantId, name]);
      return true;
    });
  }

  async update(tenantId: string, name: string, ch: ContextChanges): Promise<boolean> {
    const sets = ['updated_at = ?'];
    const params: Param[] = [ch.updatedAt];
    if (ch.head) { sets.push('head = ?'); params.push(ch.head.to); }
    if (ch.image !== undefined) { sets.push('image = ?'); params.push(ch.image); }
    if (ch.defaults !== undefined) { sets.push('defaults = ?'); params.push(toJson(ch.defaults)); }
    if (ch.config !== undefined) { sets.push('config = ?'); params.push(toJson(ch.config)); }
    const where = ch.head ? ' AND head = ?' : '';
    return (await this.db.run(`UPDATE contexts SET ${sets.join(', ')} WHERE tenant_id = ? AND name = ?${where}`,
      [...params, tenantId, name, ...(ch.head ? [ch.head.expected] : [])])) === 1;
  }
}

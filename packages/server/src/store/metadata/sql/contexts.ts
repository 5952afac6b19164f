import type { NetworkPolicy } from '@shellbase/protocol';
import type { ContextRow } from '../rows.js';
import type { ContextRepository } from '../types.js';
import type { SqlDb } from './db.js';

interface ContextRecord { tenant_id: string; name: string; head: string; image: string; created_at: string; updated_at: string; network: string | null }
const toContext = (r: ContextRecord): ContextRow => ({
  tenantId: r.tenant_id, name: r.name, head: r.head, image: r.image, createdAt: r.created_at, updatedAt: r.updated_at,
  ...(r.network ? { network: JSON.parse(r.network) } : {}),
});
const CONTEXT = 'tenant_id, name, head, image, created_at, updated_at, network';

/** Contexts: a tenant's named pointers to head versions (heads move in SqlVersions.commit). */
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
      'INSERT INTO contexts (tenant_id, name, head, image, created_at, updated_at, network) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING',
      [c.tenantId, c.name, c.head, c.image, c.createdAt, c.updatedAt, c.network ? JSON.stringify(c.network) : null])) === 1;
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
}

import type { ServiceRow, ServiceSpec } from '../rows.js';
import type { ServiceRepository } from '../types.js';
import type { SqlDb } from './db.js';

export interface ServiceRecord { tenant_id: string; context: string; name: string; token: string; spec: string; created_at: string }
export const toService = (r: ServiceRecord): ServiceRow => {
  const stored = JSON.parse(r.spec) as ServiceSpec | (Omit<ServiceSpec, 'format' | 'access'> & { format: 1 });
  if (stored.format !== 1 && stored.format !== 2 && stored.format !== 3) throw new Error(`service ${r.name}: unknown spec format ${String((stored as { format: unknown }).format)}`);
  // Format 1 predates access and network: its services are reached by URL alone.
  const spec: ServiceSpec = stored.format === 1 ? { ...stored, format: 2, access: 'url' } : stored;
  return { tenantId: r.tenant_id, context: r.context, name: r.name, token: r.token, spec, createdAt: r.created_at };
};
const SERVICE = 'tenant_id, context, name, token, spec, created_at';

/** Services' definitions (their processes live in the server: engine/services). */
export class SqlServices implements ServiceRepository {
  constructor(private readonly db: SqlDb) {}

  async create(s: ServiceRow): Promise<boolean> {
    return (await this.db.run(`INSERT INTO services (${SERVICE}, shared) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
      [s.tenantId, s.context, s.name, s.token, JSON.stringify(s.spec), s.createdAt, s.spec.share ? 1 : 0])) === 1;
  }

  async update(s: ServiceRow): Promise<boolean> {
    return (await this.db.run('UPDATE services SET spec = ?, shared = ? WHERE tenant_id = ? AND context = ? AND name = ?',
      [JSON.stringify(s.spec), s.spec.share ? 1 : 0, s.tenantId, s.context, s.name])) === 1;
  }

  async shared(tenantId: string): Promise<ServiceRow[]> {
    return (await this.db.all<ServiceRecord>(`SELECT ${SERVICE} FROM services WHERE tenant_id = ? AND shared = 1 ORDER BY context, name`, [tenantId])).map(toService);
  }

  async get(tenantId: string, context: string, name: string): Promise<ServiceRow | null> {
    const r = await this.db.get<ServiceRecord>(`SELECT ${SERVICE} FROM services WHERE tenant_id = ? AND context = ? AND name = ?`, [tenantId, context, name]);
    return r ? toService(r) : null;
  }

  async list(tenantId: string, context: string): Promise<ServiceRow[]> {
    return (await this.db.all<ServiceRecord>(`SELECT ${SERVICE} FROM services WHERE tenant_id = ? AND context = ? ORDER BY name`, [tenantId, context])).map(toService);
  }

  async byToken(token: string): Promise<ServiceRow | null> {
    const r = await this.db.get<ServiceRecord>(`SELECT ${SERVICE} FROM services WHERE token = ?`, [token]);
    return r ? toService(r) : null;
  }

  async delete(tenantId: string, context: string, name: string): Promise<boolean> {
    return (await this.db.run('DELETE FROM services WHERE tenant_id = ? AND context = ? AND name = ?', [tenantId, context, name])) === 1;
  }
}

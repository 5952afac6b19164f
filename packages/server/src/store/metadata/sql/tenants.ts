import type { NetworkPolicy } from '@shellbase/protocol';
import type { ApiKeyRow, TenantQuotas, TenantRow } from '../rows.js';
import type { TenantRepository } from '../types.js';
import type { SqlDb } from './db.js';

interface TenantRecord { id: string; name: string; admin: number; created_at: string; quotas: string | null; network: string | null }
const toTenant = (r: TenantRecord): TenantRow => ({
  id: r.id, name: r.name, admin: Number(r.admin) === 1, createdAt: r.created_at, ...(r.quotas ? { quotas: JSON.parse(r.quotas) } : {}),
  ...(r.network ? { network: JSON.parse(r.network) } : {}),
});
const TENANT = 'id, name, admin, created_at, quotas, network';

/** Tenants, their API keys (stored as SHA-256 hashes) and their stored-bytes counters. */
export class SqlTenants implements TenantRepository {
  constructor(private readonly db: SqlDb) {}

  async create(t: TenantRow): Promise<boolean> {
    return (await this.db.run('INSERT INTO tenants (id, name, admin, created_at, quotas, network) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING',
      [t.id, t.name, t.admin ? 1 : 0, t.createdAt, t.quotas ? JSON.stringify(t.quotas) : null, t.network ? JSON.stringify(t.network) : null])) === 1;
  }

  async list(): Promise<TenantRow[]> {
    return (await this.db.all<TenantRecord>(`SELECT ${TENANT} FROM tenants ORDER BY name`)).map(toTenant);
  }

  async ids(after: string | null, limit: number): Promise<string[]> {
    return (await this.db.all<{ id: string }>('SELECT id FROM tenants WHERE id > ? ORDER BY id LIMIT ?', [after ?? '', limit])).map((r) => r.id);
  }

  async get(id: string): Promise<TenantRow | null> {
    const r = await this.db.get<TenantRecord>(`SELECT ${TENANT} FROM tenants WHERE id = ?`, [id]);
    return r ? toTenant(r) : null;
  }

  async byName(name: string): Promise<TenantRow | null> {
    const r = await this.db.get<TenantRecord>(`SELECT ${TENANT} FROM tenants WHERE name = ?`, [name]);
    return r ? toTenant(r) : null;
  }

  async admin(): Promise<TenantRow | null> {
    const r = await this.db.get<TenantRecord>(`SELECT ${TENANT} FROM tenants WHERE admin = 1 ORDER BY created_at LIMIT 1`);
    return r ? toTenant(r) : null;
  }

  async setQuotas(id: string, quotas: TenantQuotas | undefined): Promise<void> {
    await this.db.run('UPDATE tenants SET quotas = ? WHERE id = ?', [quotas ? JSON.stringify(quotas) : null, id]);
  }

  async setNetwork(id: string, network: NetworkPolicy | null): Promise<void> {
    await this.db.run('UPDATE tenants SET network = ? WHERE id = ?', [network ? JSON.stringify(network) : null, id]);
  }

  async addKey(tenantId: string, keyHash: string): Promise<void> {
    await this.db.run('INSERT INTO api_keys (hash, tenant_id, created_at) VALUES (?, ?, ?)', [keyHash, tenantId, new Date().toISOString()]);
  }

  async byKey(keyHash: string): Promise<TenantRow | null> {
    const r = await this.db.get<TenantRecord>(
      `SELECT ${TENANT.split(', ').map((c) => `t.${c}`).join(', ')} FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE k.hash = ? AND k.revoked_at IS NULL`, [keyHash]);
    return r ? toTenant(r) : null;
  }

  async listKeys(tenantId: string): Promise<ApiKeyRow[]> {
    const rows = await this.db.all<{ hash: string; created_at: string; revoked_at: string | null }>(
      'SELECT hash, created_at, revoked_at FROM api_keys WHERE tenant_id = ? ORDER BY created_at', [tenantId]);
    return rows.map((r) => ({ id: `k_${r.hash.slice(0, 12)}`, createdAt: r.created_at, revokedAt: r.revoked_at }));
  }

  async revokeKeys(tenantId: string, keyId?: string): Promise<number> {
    const now = new Date().toISOString();
    if (keyId === undefined) return this.db.run('UPDATE api_keys SET revoked_at = ? WHERE tenant_id = ? AND revoked_at IS NULL', [now, tenantId]);
    return this.db.run('UPDATE api_keys SET revoked_at = ? WHERE tenant_id = ? AND substr(hash, 1, 12) = ? AND revoked_at IS NULL',
      [now, tenantId, keyId.replace(/^k_/, '')]);
  }

  async storedBytes(tenantId: string): Promise<number> {
    return Number((await this.db.get<{ n: number }>('SELECT stored_bytes AS n FROM tenants WHERE id = ?', [tenantId]))?.n ?? 0);
  }

  async totalStoredBytes(): Promise<number> {
    return Number((await this.db.get<{ n: number }>('SELECT COALESCE(SUM(stored_bytes), 0) AS n FROM tenants'))?.n ?? 0);
  }
}

import type { ServerConfig } from '../config.js';
import { ShellbaseError, notFound } from '../errors.js';
import { checkQuotas } from './quotas.js';
import { hashKey, newApiKey } from '../util/keys.js';
import type { ApiKeyRow, MetadataStore, TenantQuotas, TenantRow } from '../store/metadata/types.js';
import { newId } from '../util/ids.js';
import type { Caller } from './types.js';
import { checkName } from './validate.js';

export interface Tenant { id: string; name: string; admin: boolean; createdAt: string; quotas?: TenantQuotas }

const toTenant = (t: TenantRow): Tenant => ({ id: t.id, name: t.name, admin: t.admin, createdAt: t.createdAt, ...(t.quotas ? { quotas: t.quotas } : {}) });

function requireAdmin(caller: Caller): void {
  if (!caller.admin) throw new ShellbaseError('forbidden', 'only the admin key manages tenants', { hint: 'use the key in $SHELLBASE_HOME/admin.key' });
}

/** Tenants and their API keys (shown once, stored as hashes). Admin only. */
export class Tenants {
  constructor(private readonly md: MetadataStore, private readonly config: ServerConfig) {}

  async create(caller: Caller, name: string, quotas?: Record<string, unknown>): Promise<{ tenant: Tenant; apiKey: string }> {
    requireAdmin(caller);
    checkName(name, 'tenant');
    const row: TenantRow = { id: newId('t'), name, admin: false, createdAt: new Date().toISOString() };
    if (quotas) row.quotas = checkQuotas(quotas, this.config);
    if (!(await this.md.createTenant(row))) {
      throw new ShellbaseError('already_exists', `tenant ${JSON.stringify(name)} already exists`, { hint: 'pick another name' });
    }
    const apiKey = newApiKey();
    await this.md.addApiKey(row.id, hashKey(apiKey));
    return { tenant: toTenant(row), apiKey };
  }

  async list(caller: Caller): Promise<Tenant[]> {
    requireAdmin(caller);
    return (await this.md.listTenants()).map(toTenant);
  }

  /** A tenant other than the admin (whose key lives in admin.key and is not managed here). */
  private async managed(caller: Caller, name: string): Promise<TenantRow> {
    requireAdmin(caller);
    checkName(name, 'tenant');
    const t = await this.md.tenantByName(name);
    if (!t) throw notFound('tenant', name);
    if (t.admin) throw new ShellbaseError('failed_precondition', 'the admin tenant\'s key is not managed through the API', { hint: 'its key is $SHELLBASE_HOME/admin.key' });
    return t;
  }

  /** Another key for a tenant (to rotate: create one, switch clients, revoke the old). */
  async createKey(caller: Caller, name: string): Promise<{ key: ApiKeyRow; apiKey: string }> {
    const t = await this.managed(caller, name);
    const apiKey = newApiKey();
    await this.md.addApiKey(t.id, hashKey(apiKey));
    const key = (await this.md.listApiKeys(t.id)).find((k) => k.id === `k_${hashKey(apiKey).slice(0, 12)}`)!;
    return { key, apiKey };
  }

  async listKeys(caller: Caller, name: string): Promise<ApiKeyRow[]> {
    return this.md.listApiKeys((await this.managed(caller, name)).id);
  }

  /** Revokes one key, or every key of the tenant (its data stays). */
  async revoke(caller: Caller, name: string, keyId?: string): Promise<void> {
    const t = await this.managed(caller, name);
    const n = await this.md.revokeApiKeys(t.id, keyId);
    if (keyId !== undefined && n === 0) throw notFound('key', keyId);
  }
}

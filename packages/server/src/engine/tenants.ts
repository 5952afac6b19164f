import { ShellbaseError } from '../errors.js';
import { hashKey, newApiKey } from '../util/keys.js';
import type { MetadataStore, TenantRow } from '../store/metadata/types.js';
import { newId } from '../util/ids.js';
import type { Caller } from './types.js';
import { checkName } from './validate.js';

export interface Tenant { id: string; name: string; admin: boolean; createdAt: string }

const toTenant = (t: TenantRow): Tenant => ({ id: t.id, name: t.name, admin: t.admin, createdAt: t.createdAt });

function requireAdmin(caller: Caller): void {
  if (!caller.admin) throw new ShellbaseError('forbidden', 'only the admin key manages tenants', { hint: 'use the key in $SHELLBASE_HOME/admin.key' });
}

/** Tenants and their API keys (shown once, stored as hashes). Admin only. */
export class Tenants {
  constructor(private readonly md: MetadataStore) {}

  async create(caller: Caller, name: string): Promise<{ tenant: Tenant; apiKey: string }> {
    requireAdmin(caller);
    checkName(name, 'tenant');
    const row: TenantRow = { id: newId('t'), name, admin: false, createdAt: new Date().toISOString() };
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
}

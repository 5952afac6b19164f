import type { NetworkPolicy } from '@shellbase/protocol';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { ServerConfig } from '../config.js';
import { ShellbaseError, notFound } from '../errors.js';
import { checkQuotas } from '../core/quotas.js';
import { checkPolicy } from '../net/policy.js';
import { hashKey, newApiKey } from '../util/keys.js';
import type { ApiKeyRow, MetadataStore, TenantQuotas, TenantRow } from '../store/metadata/types.js';
import { newId } from '../util/ids.js';
import { durably, type Caller, type Durability } from '../core/deps.js';
import { checkName } from '../core/validate.js';

export interface Tenant { id: string; name: string; admin: boolean; createdAt: string; quotas?: TenantQuotas; network?: NetworkPolicy }

const toTenant = (t: TenantRow): Tenant => ({ id: t.id, name: t.name, admin: t.admin, createdAt: t.createdAt, ...(t.quotas ? { quotas: t.quotas } : {}),
  ...(t.network ? { network: t.network } : {}) });

function requireAdmin(caller: Caller): void {
  if (!caller.admin) throw new ShellbaseError('forbidden', 'only the admin key manages tenants', { hint: 'use the key in $SHELLBASE_HOME/admin.key' });
}

/** Tenants and their API keys (shown once, stored as hashes). Admin only. */
export class Tenants {
  constructor(private readonly md: MetadataStore, private readonly config: ServerConfig, private readonly durability: Durability) {}

  /**
   * On first start: the admin tenant and its key, written to `$HOME/admin.key`
   * (mode 0600). Keys are stored only as SHA-256 hashes. Returns the file.
   */
  async ensureAdmin(): Promise<string> {
    const file = path.join(this.config.home, 'admin.key');
    if (await this.md.tenants.admin()) return file;
    const key = existsSync(file) ? readFileSync(file, 'utf8').trim() : newApiKey();
    try {
      await this.md.tenants.create({ id: 't_admin', name: 'admin', admin: true, createdAt: new Date().toISOString() });
    } catch (e) {
      // Another worker of a cluster made it meanwhile: its key is in that worker's home.
      if (await this.md.tenants.admin()) return file;
      throw e;
    }
    await this.md.tenants.addKey('t_admin', hashKey(key));
    await this.durability.metadata();
    writeFileSync(file, `${key}\n`, { mode: 0o600 });
    return file;
  }

  /** Who an `Authorization: Bearer KEY` header names (the caller's hold is added by Engine.begin). */
  async authenticate(header: string | undefined): Promise<Omit<Caller, 'hold'>> {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
    if (!m) {
      throw new ShellbaseError('unauthorized', 'missing API key', {
        hint: 'send Authorization: Bearer <key>; the admin key is in $SHELLBASE_HOME/admin.key',
      });
    }
    const tenant = await this.md.tenants.byKey(hashKey(m[1]));
    if (!tenant) throw new ShellbaseError('unauthorized', 'invalid API key', { hint: 'check SHELLBASE_API_KEY' });
    return { tenantId: tenant.id, admin: tenant.admin, ...(tenant.quotas ? { quotas: tenant.quotas } : {}), ...(tenant.network ? { network: tenant.network } : {}) };
  }

  create(caller: Caller, name: string, quotas?: Record<string, unknown>, network?: unknown): Promise<{ tenant: Tenant; apiKey: string }> {
    return durably(this.durability, () => this.create_(caller, name, quotas, network));
  }

  private async create_(caller: Caller, name: string, quotas?: Record<string, unknown>, network?: unknown): Promise<{ tenant: Tenant; apiKey: string }> {
    requireAdmin(caller);
    checkName(name, 'tenant');
    const row: TenantRow = { id: newId('t'), name, admin: false, createdAt: new Date().toISOString() };
    if (quotas) row.quotas = checkQuotas(quotas, this.config);
    if (network !== undefined) row.network = checkPolicy(network);
    if (!(await this.md.tenants.create(row))) {
      throw new ShellbaseError('already_exists', `tenant ${JSON.stringify(name)} already exists`, { hint: 'pick another name' });
    }
    const apiKey = newApiKey();
    await this.md.tenants.addKey(row.id, hashKey(apiKey));
    return { tenant: toTenant(row), apiKey };
  }

  async list(caller: Caller): Promise<Tenant[]> {
    requireAdmin(caller);
    return (await this.md.tenants.list()).map(toTenant);
  }

  /** A tenant other than the admin (whose key lives in admin.key and is not managed here). */
  private async managed(caller: Caller, name: string): Promise<TenantRow> {
    requireAdmin(caller);
    checkName(name, 'tenant');
    const t = await this.md.tenants.byName(name);
    if (!t) throw notFound('tenant', name);
    if (t.admin) throw new ShellbaseError('failed_precondition', 'the admin tenant\'s key is not managed through the API', { hint: 'its key is $SHELLBASE_HOME/admin.key' });
    return t;
  }

  /** Another key for a tenant (to rotate: create one, switch clients, revoke the old). */
  createKey(caller: Caller, name: string): Promise<{ key: ApiKeyRow; apiKey: string }> {
    return durably(this.durability, async () => {
      const t = await this.managed(caller, name);
      const apiKey = newApiKey();
      await this.md.tenants.addKey(t.id, hashKey(apiKey));
      const key = (await this.md.tenants.listKeys(t.id)).find((k) => k.id === `k_${hashKey(apiKey).slice(0, 12)}`)!;
      return { key, apiKey };
    });
  }

  async listKeys(caller: Caller, name: string): Promise<ApiKeyRow[]> {
    return this.md.tenants.listKeys((await this.managed(caller, name)).id);
  }

  /** Changes a tenant's quotas (replaced whole) and egress policy (null: the server's default again); what is not given stays. */
  update(caller: Caller, name: string, change: { quotas?: Record<string, unknown>; network?: unknown }): Promise<Tenant> {
    return durably(this.durability, async () => {
      const t = await this.managed(caller, name);
      const quotas = change.quotas === undefined ? undefined : checkQuotas(change.quotas, this.config);
      const network = change.network === undefined ? undefined : change.network === null ? null : checkPolicy(change.network);
      if (quotas !== undefined) await this.md.tenants.setQuotas(t.id, quotas);
      if (network !== undefined) await this.md.tenants.setNetwork(t.id, network);
      return toTenant((await this.md.tenants.get(t.id))!);
    });
  }

  /** Revokes one key, or every key of the tenant (its data stays). */
  revoke(caller: Caller, name: string, keyId?: string): Promise<void> {
    return durably(this.durability, async () => {
      const t = await this.managed(caller, name);
      const n = await this.md.tenants.revokeKeys(t.id, keyId);
      if (keyId !== undefined && n === 0) throw notFound('key', keyId);
    });
  }
}

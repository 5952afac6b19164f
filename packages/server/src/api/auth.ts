import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ShellbaseError } from '../errors.js';
import type { Caller } from '../engine/types.js';
import type { MetadataStore } from '../store/metadata/types.js';
import { hashKey, newApiKey } from '../util/keys.js';

/**
 * On first start: the admin tenant and its key, written to `$HOME/admin.key`
 * (mode 0600). Keys are stored only as SHA-256 hashes.
 */
export async function ensureAdmin(md: MetadataStore, home: string): Promise<string> {
  const file = path.join(home, 'admin.key');
  if (await md.adminTenant()) return file;
  const key = existsSync(file) ? readFileSync(file, 'utf8').trim() : newApiKey();
  await md.createTenant({ id: 't_admin', name: 'admin', admin: true, createdAt: new Date().toISOString() });
  await md.addApiKey('t_admin', hashKey(key));
  writeFileSync(file, `${key}\n`, { mode: 0o600 });
  return file;
}

/** The caller behind an `Authorization: Bearer KEY` header (the request adds its hold). */
export async function authenticate(md: MetadataStore, header: string | undefined): Promise<Omit<Caller, 'hold'>> {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  if (!m) {
    throw new ShellbaseError('unauthorized', 'missing API key', {
      hint: 'send Authorization: Bearer <key>; the admin key is in $SHELLBASE_HOME/admin.key',
    });
  }
  const tenant = await md.tenantForKey(hashKey(m[1]));
  if (!tenant) throw new ShellbaseError('unauthorized', 'invalid API key', { hint: 'check SHELLBASE_API_KEY' });
  return { tenantId: tenant.id, admin: tenant.admin, ...(tenant.quotas ? { quotas: tenant.quotas } : {}) };
}

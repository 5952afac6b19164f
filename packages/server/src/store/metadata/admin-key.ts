import { hashKey, newApiKey } from '../../util/keys.js';
import { openMetadataStore } from './index.js';

/**
 * A new API key of the admin tenant, made in the metadata store at `url` (Postgres: a cluster's
 * shared metadata; SQLite: a file, or `meta.db` in `home`); the admin tenant too when nobody made
 * it yet. Keys are stored only as hashes, so an existing key can never be shown again: each call
 * adds one (revoke old ones with `shellbase key revoke admin KEY_ID`).
 */
export async function createAdminKey(url: string | undefined, home: string): Promise<{ key: string; tenantCreated: boolean }> {
  const md = await openMetadataStore(url, home);
  try {
    let tenantCreated = false;
    if (!(await md.tenants.admin())) {
      try {
        await md.tenants.create({ id: 't_admin', name: 'admin', admin: true, createdAt: new Date().toISOString() });
        tenantCreated = true;
      } catch (e) {
        // A worker made it meanwhile.
        if (!(await md.tenants.admin())) throw e;
      }
    }
    const key = newApiKey();
    await md.tenants.addKey('t_admin', hashKey(key));
    await md.sync();
    return { key, tenantCreated };
  } finally {
    await md.close();
  }
}

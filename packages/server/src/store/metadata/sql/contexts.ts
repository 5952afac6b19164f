import type { ContextConfig, ContextDefaults, NetworkPolicy } from '@shellbase/protocol';
import type { ContextChanges, ContextRow, VersionRow } from '../rows.js';
import type { ContextRepository, ContextState } from '../types.js';
import type { Param, SqlDb } from './db.js';
import { toService, type ServiceRecord } from './services.js';
import { toVersion, type VersionRecord } from './versions.js';

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
const VERSION = ['id', 'tenant_id', 'parent', 'merged', 'context', 'depth', 'layers', 'cause', 'bytes', 'created_at'];
/** A context's services as one JSON text of [name, token, spec, created_at] arrays, by name (either dialect's words). */
const SERVICES: Record<SqlDb['dialect'], string> = {
  postgres: `(SELECT json_agg(json_build_array(s.name, s.token, s.spec, s.created_at) ORDER BY s.name)::text
    FROM services s WHERE s.tenant_id = c.tenant_id AND s.context = c.name)`,
  sqlite: `(SELECT json_group_array(json_array(s.name, s.token, s.spec, s.created_at) ORDER BY s.name)
    FROM services s WHERE s.tenant_id = c.tenant_id AND s.context = c.name)`,
};

/** Contexts: a tenant's named pointers to head versions (heads move in SqlVersions.commit, and in `update` for builds). */
export class SqlContexts implements ContextRepository {
  constructor(private readonly db: SqlDb) {}

  async get(tenantId: string, name: string): Promise<ContextRow | null> {
    const r = await this.db.get<ContextRecord>(`SELECT ${CONTEXT} FROM contexts WHERE tenant_id = ? AND name = ?`, [tenantId, name]);
    return r ? toContext(r) : null;
  }

  async state(tenantId: string, name: string): Promise<ContextState | null> {
    const r = await this.db.get<ContextRecord & Record<string, unknown> & { services: string | null }>(
      `SELECT ${CONTEXT.split(', ').map((c) => `c.${c}`).join(', ')}, ${VERSION.map((c) => `v.${c} AS v_${c}`).join(', ')}, ${SERVICES[this.db.dialect]} AS services
       FROM contexts c LEFT JOIN versions v ON v.id = c.head WHERE c.tenant_id = ? AND c.name = ?`, [tenantId, name]);
    if (!r) return null;
    const head = r.v_id === null ? null : toVersion(Object.fromEntries(VERSION.map((c) => [c, r[`v_${c}`]])) as unknown as VersionRecord);
    const services = (JSON.parse(r.services ?? '[]') as [string, string, string, string][]).map(([service, token, spec, createdAt]) =>
      toService({ tenant_id: tenantId, context: name, name: service, token, spec, created_at: createdAt } satisfies ServiceRecord));
    return { context: toContext(r), head, services };
  }

  async head(tenantId: string, name: string): Promise<VersionRow | null> {
    const r = await this.db.get<VersionRecord>(`SELECT ${VERSION.join(', ')} FROM versions WHERE id = (SELECT head FROM contexts WHERE tenant_id = ? AND name = ?)`, [tenantId, name]);
    return r ? toVersion(r) : null;
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

import type { ImageRow, NewVersion, StoredImageConfig } from '../rows.js';
import type { BuildCacheRepository, ImageRepository } from '../types.js';
import type { SqlDb } from './db.js';
import { insertVersion } from './versions.js';

interface ImageRecord { tenant_id: string; ref: string; digest: string; version: string; config: string; bytes: number; created_at: string }
const IMAGE = 'tenant_id, ref, digest, version, config, bytes, created_at';

const toImage = (r: ImageRecord): ImageRow => {
  const config = JSON.parse(r.config) as StoredImageConfig;
  if (config.format !== 1) throw new Error(`image ${r.ref}: unknown config format ${String(config.format)}`);
  return { tenantId: r.tenant_id, ref: r.ref, digest: r.digest, version: r.version, config, bytes: r.bytes, createdAt: r.created_at };
};

/** Tenants' OCI images (their root versions are versions like any other: sql/versions.ts). */
export class SqlImages implements ImageRepository {
  constructor(private readonly db: SqlDb) {}

  async put(row: ImageRow, version?: NewVersion): Promise<void> {
    await this.db.tx(async (db) => {
      if (version) await insertVersion(db, version, false);
      await db.run(`INSERT INTO images (${IMAGE}) VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (tenant_id, ref) DO UPDATE SET digest = excluded.digest, version = excluded.version, config = excluded.config,
          bytes = excluded.bytes, created_at = excluded.created_at`,
      [row.tenantId, row.ref, row.digest, row.version, JSON.stringify(row.config), row.bytes, row.createdAt]);
    });
  }

  async get(tenantId: string, ref: string): Promise<ImageRow | null> {
    const r = await this.db.get<ImageRecord>(`SELECT ${IMAGE} FROM images WHERE tenant_id = ? AND ref = ?`, [tenantId, ref]);
    return r ? toImage(r) : null;
  }

  async byDigest(tenantId: string, digest: string): Promise<ImageRow | null> {
    const r = await this.db.get<ImageRecord>(`SELECT ${IMAGE} FROM images WHERE tenant_id = ? AND digest = ? LIMIT 1`, [tenantId, digest]);
    return r ? toImage(r) : null;
  }

  async list(tenantId: string): Promise<ImageRow[]> {
    return (await this.db.all<ImageRecord>(`SELECT ${IMAGE} FROM images WHERE tenant_id = ? ORDER BY ref`, [tenantId])).map(toImage);
  }

  async delete(tenantId: string, ref: string): Promise<boolean> {
    return (await this.db.run('DELETE FROM images WHERE tenant_id = ? AND ref = ?', [tenantId, ref])) === 1;
  }
}

/** The build cache (its rows go with their versions: SqlVersions.drop). */
export class SqlBuildCache implements BuildCacheRepository {
  constructor(private readonly db: SqlDb) {}

  async get(tenantId: string, key: string): Promise<string | null> {
    return (await this.db.get<{ version: string }>('SELECT version FROM build_cache WHERE tenant_id = ? AND key = ?', [tenantId, key]))?.version ?? null;
  }

  async put(tenantId: string, key: string, version: string, createdAt: string): Promise<void> {
    await this.db.run(`INSERT INTO build_cache (tenant_id, key, version, created_at) VALUES (?, ?, ?, ?)
      ON CONFLICT (tenant_id, key) DO UPDATE SET version = excluded.version, created_at = excluded.created_at`, [tenantId, key, version, createdAt]);
  }
}

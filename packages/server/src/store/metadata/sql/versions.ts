import type { Change } from '../../snapshotter/types.js';
import type { CommitVersionOptions, LayerRow, NewVersion, VersionRow } from '../rows.js';
import type { DropResult, Retention, VersionRepository } from '../types.js';
import { chunked, marks, type SqlDb } from './db.js';
import { checkFence } from './fence.js';
import { addRefs } from './refs.js';

export interface VersionRecord {
  id: string; tenant_id: string; parent: string | null; merged: string | null; context: string | null; depth: number; layers: string;
  cause: string; bytes: number; created_at: string;
}
/** Every column of a version but its change set. */
const COLUMNS = 'id, tenant_id, parent, merged, context, depth, layers, cause, bytes, created_at';

export const toVersion = (r: VersionRecord): VersionRow => ({
  id: r.id, tenantId: r.tenant_id, parent: r.parent, merged: r.merged, context: r.context, depth: Number(r.depth), layers: JSON.parse(r.layers),
  cause: JSON.parse(r.cause), bytes: Number(r.bytes), createdAt: r.created_at,
});
const toLayer = (r: { id: string; kind: LayerRow['kind']; bytes: number; created_at: string; digest?: string | null }): LayerRow => ({
  id: r.id, kind: r.kind, bytes: Number(r.bytes), createdAt: r.created_at, ...(r.digest ? { digest: r.digest } : {}),
});

const HEAD_MOVED = new Error('head moved');
/** Parameters per statement: below SQLite's and Postgres's limits with room to spare. */
const CHUNK = 500;

/** Inserts a version (unattached: `detached`) and counts its references to its layers. */
export async function insertVersion(db: SqlDb, v: NewVersion, detached: boolean): Promise<void> {
  await db.run(
    `INSERT INTO versions (id, tenant_id, parent, merged, context, depth, layers, changes, cause, bytes, created_at, detached)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [v.id, v.tenantId, v.parent, v.merged ?? null, v.context ?? null, v.depth, JSON.stringify(v.layers),
      v.changes === null ? null : JSON.stringify(v.changes), JSON.stringify(v.cause), v.bytes, v.createdAt, detached ? 1 : 0],
  );
  await addRefs(db, v.tenantId, v.layers, 1);
}

/**
 * Versions, the layer rows they refer to, and what garbage collection asks of
 * them. An image's root version (sql/images.ts) is a root of what collection
 * keeps, as a head is, while an image names it. The `detached` column marks versions committed without moving a head
 * (conflicts, work whose context went): no head reaches them, so while young
 * and owned they are roots of what collection keeps. A walk over history
 * follows `parent` and `merged` in one recursive term (`… ON p.id = v.parent
 * OR p.id = v.merged`): Postgres allows a recursive CTE only one.
 */
export class SqlVersions implements VersionRepository {
  constructor(private readonly db: SqlDb) {}

  protected async insertLayer(db: SqlDb, l: LayerRow): Promise<void> {
    await db.run('INSERT INTO layers (id, kind, bytes, created_at, refs, digest) VALUES (?, ?, ?, ?, 0, ?) ON CONFLICT (id) DO NOTHING',
      [l.id, l.kind, l.bytes, l.createdAt, l.digest ?? null]);
  }

  async commit(options: CommitVersionOptions): Promise<boolean> {
    return this.commitAll([options]);
  }

  async commitAll(all: readonly CommitVersionOptions[]): Promise<boolean> {
    try {
      await this.db.tx(async (db) => {
        for (const o of all) await this.commitIn(db, o);
      });
      return true;
    } catch (e) {
      if (e === HEAD_MOVED) return false;
      throw e;
    }
  }

  /** One commit's statements inside a transaction; HEAD_MOVED (rolling it back) when a check fails. */
  private async commitIn(db: SqlDb, { version, layer, moveHead, fence, requireLayers }: CommitVersionOptions): Promise<void> {
    if (fence) await checkFence(db, fence);
    if (requireLayers) {
      const older = [...new Set(version.layers)].filter((id) => id !== layer?.id);
      if ((await this.knownLayers(older, db)).size !== older.length) throw HEAD_MOVED;
    }
    if (layer) await this.insertLayer(db, layer);
    await insertVersion(db, version, !moveHead);
    if (!moveHead) return;
    const moved = await db.run('UPDATE contexts SET head = ?, updated_at = ? WHERE tenant_id = ? AND name = ? AND head = ?',
      [version.id, version.createdAt, moveHead.tenantId, moveHead.context, moveHead.expectedHead]);
    if (moved !== 1) throw HEAD_MOVED; // rolls the whole transaction back
  }

  async get(id: string): Promise<VersionRow | null> {
    const r = await this.db.get<VersionRecord>(`SELECT ${COLUMNS} FROM versions WHERE id = ?`, [id]);
    return r ? toVersion(r) : null;
  }

  async changes(id: string): Promise<Change[] | null> {
    const r = await this.db.get<{ changes: string | null }>('SELECT changes FROM versions WHERE id = ?', [id]);
    return r?.changes ? (JSON.parse(r.changes) as Change[]) : null;
  }

  async lineage(id: string, limit: number): Promise<VersionRow[]> {
    const rows = await this.db.all<VersionRecord>(
      `WITH RECURSIVE chain(id, n) AS (
         SELECT id, 0 FROM versions WHERE id = ?
         UNION ALL
         SELECT v.parent, c.n + 1 FROM versions v JOIN chain c ON v.id = c.id
         WHERE v.parent IS NOT NULL AND c.n + 1 < ?
       )
       SELECT ${COLUMNS.split(', ').map((c) => `v.${c}`).join(', ')} FROM chain c JOIN versions v ON v.id = c.id ORDER BY c.n`,
      [id, limit],
    );
    return rows.map(toVersion);
  }

  async ensureImage(version: NewVersion, layer: LayerRow): Promise<void> {
    await this.db.tx(async (db) => {
      await this.insertLayer(db, layer);
      if (!(await db.get('SELECT 1 AS x FROM versions WHERE id = ?', [version.id]))) await insertVersion(db, version, false);
    });
  }

  async imageLayers(): Promise<string[]> {
    return (await this.db.scan<{ id: string }>("SELECT id FROM layers WHERE kind = 'image'")).map((r) => r.id);
  }

  async layers(): Promise<LayerRow[]> {
    const rows = await this.db.scan<{ id: string; kind: LayerRow['kind']; bytes: number; created_at: string; digest: string | null }>(
      'SELECT id, kind, bytes, created_at, digest FROM layers ORDER BY id');
    return rows.map(toLayer);
  }

  async knownLayers(ids: readonly string[], db: SqlDb = this.db): Promise<Set<string>> {
    const found = await chunked(ids, CHUNK, (c) => db.all<{ id: string }>(`SELECT id FROM layers WHERE id IN (${marks(c.length)})`, c));
    return new Set(found.map((r) => r.id));
  }

  async layerBytes(ids: readonly string[]): Promise<number> {
    const unique = [...new Set(ids)];
    const sums = await chunked(unique, CHUNK, (c) => this.db.all<{ n: number }>(`SELECT COALESCE(SUM(bytes), 0) AS n FROM layers WHERE id IN (${marks(c.length)})`, c));
    return sums.reduce((s, r) => s + Number(r.n), 0);
  }

  async replaceLayerPrefix(prefix: string[], replacement: string[], layer: LayerRow, from: string | null = null): Promise<number> {
    const text = JSON.stringify(prefix).slice(0, -1);
    const to = JSON.stringify(replacement).slice(0, -1);
    const starts = `substr(layers, 1, ?) = ? AND substr(layers, ? + 1, 1) IN (',', ']')`;
    const startsParams = [text.length, text, text.length];
    // Only a tenant's own versions share its (non-image) layers.
    const tenant = (await this.db.get<{ tenant_id: string }>('SELECT tenant_id FROM layer_refs WHERE layer_id = ? LIMIT 1', [prefix[prefix.length - 1]]))?.tenant_id;
    if (tenant === undefined) return 0;
    // From the version that introduced the prefix, its descendants that still start with it (a few,
    // since chains are squashed often); without one, every version of the tenant is looked at.
    const which = from === null
      ? { sql: `tenant_id = ? AND ${starts}`, params: [tenant, ...startsParams] }
      : {
        sql: `id IN (WITH RECURSIVE sub(id) AS (
            SELECT id FROM versions WHERE id = ? AND ${starts}
            UNION SELECT c.id FROM versions c JOIN sub s ON c.parent = s.id OR c.merged = s.id WHERE ${starts.replace(/layers/g, 'c.layers')}
          ) SELECT id FROM sub)`,
        params: [from, ...startsParams, ...startsParams],
      };
    return this.db.tx(async (db) => {
      await this.insertLayer(db, layer);
      const n = await db.run(`UPDATE versions SET layers = ? || substr(layers, ?) WHERE ${which.sql}`, [to, text.length + 1, ...which.params]);
      if (n > 0) {
        await addRefs(db, tenant, replacement.filter((l) => !prefix.includes(l)), n);
        await addRefs(db, tenant, prefix.filter((l) => !replacement.includes(l)), -n);
      }
      return n;
    });
  }

  async garbage(tenantId: string, r: Retention, pinned: readonly string[], limit: number): Promise<string[]> {
    const pins = pinned.slice(0, CHUNK);
    // Descendants of pinned versions (a rebase walks from the head down to its base) and the heads stay.
    const keep = `
      pins(id) AS (
        SELECT id FROM versions WHERE id IN (${pins.length ? marks(pins.length) : 'NULL'})
        UNION SELECT c.id FROM versions c JOIN pins p ON c.parent = p.id OR c.merged = p.id
      ),
      heads(id) AS (SELECT head FROM contexts WHERE tenant_id = ? UNION SELECT version FROM images WHERE tenant_id = ?)`;
    // Old versions more than keepVersions steps from every root.
    const old = await this.db.scan<{ id: string }>(
      `WITH RECURSIVE ${keep},
       roots(id) AS (
         SELECT id FROM heads
         UNION SELECT id FROM versions WHERE tenant_id = ? AND detached = 1 AND context IS NOT NULL AND created_at >= ?
       ),
       near(id, d) AS (
         SELECT id, 0 FROM roots
         UNION SELECT p.id, n.d + 1 FROM near n JOIN versions v ON v.id = n.id JOIN versions p ON p.id = v.parent OR p.id = v.merged WHERE n.d + 1 < ?
       )
       SELECT v.id FROM versions v
       WHERE v.tenant_id = ? AND v.created_at < ?
         AND v.id NOT IN (SELECT id FROM near) AND v.id NOT IN (SELECT id FROM heads) AND v.id NOT IN (SELECT id FROM pins)
       ORDER BY v.created_at LIMIT ?`,
      [...pins, tenantId, tenantId, tenantId, r.cutoff, r.keepVersions, tenantId, r.cutoff, limit],
    );
    if (old.length >= limit) return old.map((x) => x.id);
    // Versions no context owns that nothing owned (or a head) stands on: walked up from owned children.
    const orphans = await this.db.scan<{ id: string }>(
      `WITH RECURSIVE ${keep},
       live(id) AS (
         SELECT p.id FROM versions p JOIN versions c ON c.parent = p.id WHERE p.tenant_id = ? AND p.context IS NULL AND c.context IS NOT NULL
         UNION SELECT p.id FROM versions p JOIN versions c ON c.merged = p.id WHERE p.tenant_id = ? AND p.context IS NULL AND c.context IS NOT NULL
         UNION SELECT id FROM heads
         UNION SELECT p.id FROM live l JOIN versions v ON v.id = l.id JOIN versions p ON p.id = v.parent OR p.id = v.merged WHERE v.context IS NULL
       )
       SELECT v.id FROM versions v
       WHERE v.tenant_id = ? AND v.context IS NULL AND v.created_at >= ?
         AND v.id NOT IN (SELECT id FROM live) AND v.id NOT IN (SELECT id FROM pins)
       ORDER BY v.created_at LIMIT ?`,
      [...pins, tenantId, tenantId, tenantId, tenantId, tenantId, r.cutoff, limit - old.length],
    );
    return [...old, ...orphans].map((x) => x.id);
  }

  async drop(ids: readonly string[], keepLayers: ReadonlySet<string>): Promise<DropResult> {
    const out: DropResult = { versions: 0, layers: [], deferred: 0 };
    for (let i = 0; i < ids.length; i += CHUNK) {
      const chunk = ids.slice(i, i + CHUNK);
      // A transaction may run more than once (sql/db.ts): it returns what it did, counted here after.
      const r = await this.db.tx(async (db): Promise<DropResult> => {
        const rows = await db.all<{ id: string; tenant_id: string; layers: string }>(
          `SELECT id, tenant_id, layers FROM versions WHERE id IN (${marks(chunk.length)})
             AND id NOT IN (SELECT head FROM contexts) AND id NOT IN (SELECT version FROM images)`, chunk);
        if (rows.length === 0) return { versions: 0, layers: [], deferred: 0 };
        const doomed = rows.map((r) => r.id);
        const m = marks(doomed.length);
        await db.run(`UPDATE versions SET parent = NULL WHERE parent IN (${m})`, doomed);
        await db.run(`UPDATE versions SET merged = NULL WHERE merged IN (${m})`, doomed);
        const versions = await db.run(`DELETE FROM versions WHERE id IN (${m})`, doomed);
        await db.run(`DELETE FROM build_cache WHERE version IN (${m})`, doomed);
        // Each layer loses one reference per dropped version that named it.
        const byTenant = new Map<string, Map<string, number>>();
        for (const r of rows) {
          const counts = byTenant.get(r.tenant_id) ?? new Map<string, number>();
          for (const l of JSON.parse(r.layers) as string[]) counts.set(l, (counts.get(l) ?? 0) + 1);
          byTenant.set(r.tenant_id, counts);
        }
        for (const [tenant, counts] of byTenant) {
          const byCount = new Map<number, string[]>();
          for (const [l, n] of counts) byCount.set(n, [...(byCount.get(n) ?? []), l]);
          for (const [n, ls] of byCount) await addRefs(db, tenant, ls, -n);
        }
        const touched = [...new Set([...byTenant.values()].flatMap((c) => [...c.keys()]))];
        return { ...(await this.deleteUnreferenced(db, touched, keepLayers)), versions };
      });
      out.versions += r.versions;
      out.layers.push(...r.layers);
      out.deferred += r.deferred;
    }
    return out;
  }

  /** Deletes the rows of candidates no version refers to, but those in `keep` (counted as deferred). */
  private async deleteUnreferenced(db: SqlDb, candidates: readonly string[], keep: ReadonlySet<string>): Promise<DropResult> {
    if (candidates.length === 0) return { versions: 0, layers: [], deferred: 0 };
    const unreferenced = (await db.all<{ id: string }>(
      `SELECT id FROM layers WHERE refs <= 0 AND kind != 'image' AND id IN (${marks(candidates.length)})`, candidates)).map((r) => r.id);
    const ids = unreferenced.filter((id) => !keep.has(id));
    const rows = ids.length === 0 ? [] : await db.all<{ id: string; kind: LayerRow['kind']; bytes: number; created_at: string }>(
      `DELETE FROM layers WHERE id IN (${marks(ids.length)}) RETURNING id, kind, bytes, created_at`, ids);
    return { versions: 0, layers: rows.map(toLayer), deferred: unreferenced.length - ids.length };
  }

  async layerByDigest(digest: string): Promise<LayerRow | null> {
    const r = await this.db.get<{ id: string; kind: LayerRow['kind']; bytes: number; created_at: string; digest: string }>(
      'SELECT id, kind, bytes, created_at, digest FROM layers WHERE digest = ? ORDER BY created_at LIMIT 1', [digest]);
    return r ? toLayer(r) : null;
  }

  async addLayer(layer: LayerRow): Promise<void> {
    await this.insertLayer(this.db, layer);
  }

  async tenantRefersTo(tenantId: string, layerId: string): Promise<boolean> {
    return (await this.db.get('SELECT 1 AS x FROM layer_refs WHERE tenant_id = ? AND layer_id = ? AND refs > 0', [tenantId, layerId])) !== undefined;
  }

  async dropUnreferencedLayers(keep: ReadonlySet<string>, limit: number): Promise<DropResult> {
    const ids = (await this.db.all<{ id: string }>("SELECT id FROM layers WHERE refs <= 0 AND kind != 'image' LIMIT ?", [limit])).map((r) => r.id);
    return this.db.tx((db) => this.deleteUnreferenced(db, ids, keep));
  }
}

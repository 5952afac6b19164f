import { marks, type SqlDb } from './db.js';

/**
 * How many versions refer to each layer, per tenant (`layer_refs`) and in all
 * (`layers.refs`), and each tenant's stored bytes (`tenants.stored_bytes`: the
 * bytes of the distinct layers its versions refer to). Kept in the same
 * transaction as the versions that change them, so they are never stale.
 */
export async function addRefs(db: SqlDb, tenantId: string, layerIds: readonly string[], delta: number): Promise<void> {
  const ids = [...new Set(layerIds)];
  if (ids.length === 0 || delta === 0) return;
  await db.run(`UPDATE layers SET refs = refs + ? WHERE id IN (${marks(ids.length)})`, [delta, ...ids]);
  const rows = await db.all<{ layer_id: string; refs: number }>(
    `INSERT INTO layer_refs (tenant_id, layer_id, refs) VALUES ${ids.map(() => '(?, ?, ?)').join(', ')}
     ON CONFLICT (tenant_id, layer_id) DO UPDATE SET refs = layer_refs.refs + excluded.refs RETURNING layer_id, refs`,
    ids.flatMap((id) => [tenantId, id, delta]),
  );
  // A layer the tenant now refers to for the first time, or no longer refers to at all, changes its bytes.
  const crossed = rows.filter((r) => (delta > 0 ? Number(r.refs) === delta : Number(r.refs) <= 0)).map((r) => r.layer_id);
  if (crossed.length) {
    const sign = delta > 0 ? '+' : '-';
    await db.run(`UPDATE tenants SET stored_bytes = stored_bytes ${sign} (SELECT COALESCE(SUM(bytes), 0) FROM layers WHERE id IN (${marks(crossed.length)})) WHERE id = ?`,
      [...crossed, tenantId]);
  }
  if (delta < 0) await db.run(`DELETE FROM layer_refs WHERE tenant_id = ? AND refs <= 0 AND layer_id IN (${marks(ids.length)})`, [tenantId, ...ids]);
}

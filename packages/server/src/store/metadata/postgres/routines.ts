import type pg from 'pg';
import { underMigrationLock } from './migrate.js';

/**
 * Functions of the Postgres dialect that do in one round trip what the shared SQL (sql/*.ts) does
 * in several statements. Each is versioned by its name (`shellbase_commit_1`): a change is a new
 * function beside the old one, so workers of two releases never call a body they do not expect.
 * They are made (or made again, unchanged) when a store opens, under the migration lock; they
 * are code, not data, and sit beside the schema of migrations.ts without changing it.
 *
 * `shellbase_tenants_changed_1` (a trigger on api_keys and on tenants' name, admin, quotas and
 * network) announces on TENANTS_CHANNEL that what an API key resolves to may have changed: each
 * worker's cache of key lookups (tenants-cache.ts) listens and forgets.
 *
 * `shellbase_commit_1` is SqlVersions.commit (sql/versions.ts) and addRefs (sql/refs.ts) as one
 * statement. It runs at the database's default isolation (read committed), where row locks give
 * what it needs: the context's row is locked first (FOR UPDATE, the head compared after the lock
 * is granted, so of two commits expecting one head the second sees it moved and changes
 * nothing); with `require_layers`, the version's existing layers are locked FOR SHARE and must
 * all still exist, so garbage collection (SERIALIZABLE) cannot drop one under it: it waits, then
 * fails to serialize and runs again. Counters move by row-locked increments. Answers `ok`,
 * `moved` (the head was not `m_expected`; nothing changed) or `stale` (a layer is gone; nothing
 * changed).
 */
export const ROUTINES = `
CREATE OR REPLACE FUNCTION shellbase_commit_1(
  v_id TEXT, v_tenant TEXT, v_parent TEXT, v_merged TEXT, v_context TEXT, v_depth INTEGER, v_layers TEXT, v_changes TEXT,
  v_cause TEXT, v_bytes BIGINT, v_created TEXT, v_detached INTEGER,
  l_id TEXT, l_kind TEXT, l_bytes BIGINT, l_created TEXT, l_digest TEXT,
  m_tenant TEXT, m_context TEXT, m_expected TEXT, require_layers BOOLEAN) RETURNS TEXT
LANGUAGE plpgsql AS $fn$
DECLARE
  ids TEXT[] := ARRAY(SELECT DISTINCT x FROM jsonb_array_elements_text(v_layers::jsonb) AS x);
  have INTEGER;
  crossed INTEGER;
  added BIGINT;
BEGIN
  IF m_context IS NOT NULL THEN
    PERFORM 1 FROM contexts WHERE tenant_id = m_tenant AND name = m_context AND head = m_expected FOR UPDATE;
    IF NOT FOUND THEN RETURN 'moved'; END IF;
  END IF;
  IF require_layers THEN
    SELECT count(*) INTO have FROM (SELECT 1 FROM layers WHERE id = ANY(ids) AND id IS DISTINCT FROM l_id FOR SHARE) AS present;
    IF have <> cardinality(array_remove(ids, l_id)) THEN RETURN 'stale'; END IF;
  END IF;
  IF l_id IS NOT NULL THEN
    INSERT INTO layers (id, kind, bytes, created_at, refs, digest) VALUES (l_id, l_kind, l_bytes, l_created, 0, l_digest) ON CONFLICT (id) DO NOTHING;
  END IF;
  INSERT INTO versions (id, tenant_id, parent, merged, context, depth, layers, changes, cause, bytes, created_at, detached)
    VALUES (v_id, v_tenant, v_parent, v_merged, v_context, v_depth, v_layers, v_changes, v_cause, v_bytes, v_created, v_detached);
  UPDATE layers SET refs = refs + 1 WHERE id = ANY(ids);
  -- A layer the tenant refers to for the first time adds its bytes to the tenant's.
  WITH up AS (
    INSERT INTO layer_refs (tenant_id, layer_id, refs) SELECT v_tenant, unnest(ids), 1
    ON CONFLICT (tenant_id, layer_id) DO UPDATE SET refs = layer_refs.refs + excluded.refs RETURNING layer_id, refs
  )
  SELECT count(*), COALESCE(SUM(l.bytes), 0) INTO crossed, added FROM up JOIN layers l ON l.id = up.layer_id WHERE up.refs = 1;
  IF crossed > 0 THEN UPDATE tenants SET stored_bytes = stored_bytes + added WHERE id = v_tenant; END IF;
  IF m_context IS NOT NULL THEN
    UPDATE contexts SET head = v_id, updated_at = v_created WHERE tenant_id = m_tenant AND name = m_context;
  END IF;
  RETURN 'ok';
END
$fn$;

CREATE OR REPLACE FUNCTION shellbase_tenants_changed_1() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_notify('shellbase_tenants_1', '');
  RETURN NULL;
END
$fn$;
DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'shellbase_api_keys_changed_1') THEN
    CREATE TRIGGER shellbase_api_keys_changed_1 AFTER UPDATE OR DELETE ON api_keys
      FOR EACH STATEMENT EXECUTE FUNCTION shellbase_tenants_changed_1();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'shellbase_tenants_changed_1') THEN
    CREATE TRIGGER shellbase_tenants_changed_1 AFTER UPDATE OF name, admin, quotas, network OR DELETE ON tenants
      FOR EACH STATEMENT EXECUTE FUNCTION shellbase_tenants_changed_1();
  END IF;
END
$do$;`;

/** The channel on which a change to API keys or to what a tenant row says is announced (tenants-cache.ts). */
export const TENANTS_CHANNEL = 'shellbase_tenants_1';

/** Makes the functions above (idempotent; one process at a time). */
export async function installRoutines(pool: pg.Pool): Promise<void> {
  await underMigrationLock(pool, async (client) => {
    await client.query(ROUTINES);
    return false;
  });
}

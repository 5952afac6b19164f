import type { PostgresMigration } from './migrations.js';

/**
 * The cluster's own tables, in the same Postgres database as the metadata but versioned apart
 * (`cluster_schema_version`): they exist only in cluster mode, so the metadata schema stays the
 * same in both dialects (migrations.ts) and its numbers stay shared with SQLite. Every name starts
 * with `cluster_`. Never edit a migration that shipped: append one.
 *
 * - `cluster_workers`: each worker process (a random id per start), the URL others reach it at,
 *   its last heartbeat (the database's clock, so workers' clocks never matter) and its load.
 * - `cluster_pins`: what running work on a worker uses (garbage collection's pins), replaced at
 *   each heartbeat; a worker whose heartbeat lapsed pins nothing.
 * - `cluster_layer_blobs`: where a committed layer lives in the object store (its packed blob's
 *   digest and size, and the pack format); written before a version refers to the layer.
 * - `cluster_blob_deletions`: blobs of layers garbage collection dropped, deleted from the object
 *   store once `due_at` passes (a grace period: a worker that read a version row before the drop
 *   can still fetch its layers) and only when no layer row names the digest any more.
 * - `cluster_slots` (2): what each worker runs per tenant and kind (`query`, `service`), counted against the
 *   tenant's quota across live workers by `cluster_admit` (one statement: it takes an advisory
 *   lock per tenant and kind, counts, and takes a slot); a dead worker's slots lapse with it.
 * - `cluster_leases` (3): which worker runs a service now (`kind` 'service', `key` its token),
 *   with an epoch that grows each time the lease changes hands; a lease whose worker's heartbeat
 *   lapsed may be taken. `cluster_workers.gateway`: where the worker's gateway answers.
 * - `cluster_secrets` (4): the cluster secret (`name` 'forward'), 32 random bytes as hex that the
 *   first worker to start makes; workers sign what they pass to each other with it
 *   (cluster/peers.ts). Unused when workers read the secret from a file instead.
 * - `cluster_machine_blobs` (5): which blobs of machines' files (a hibernated machine's memory and
 *   disk, a snapshot's) each machine or snapshot (`owner`, its id) names; written before its row
 *   names them, dropped when the row stops naming them or goes. A blob no owner and no layer names
 *   goes to `cluster_blob_deletions`. Filled at migration from the rows' `stored` files.
 * - `cluster_lease_epochs` (6): the sequence every lease's epoch is drawn from, so that an epoch
 *   is never given twice for one lease, even after its row was deleted (an unclaim, or its
 *   worker's row removed as gone) and the lease taken again: a stale holder's fence can never
 *   match a later lease.
 * - `cluster_admit` (7) counts as the admitting worker's heartbeat: the slots of a worker that
 *   just came back from an outage are counted by every admission from its first one on.
 */
export const CLUSTER_MIGRATIONS: PostgresMigration[] = [
  {
    version: 1,
    sql: `
      CREATE TABLE cluster_workers (
        id TEXT COLLATE "C" PRIMARY KEY,
        address TEXT NOT NULL,
        started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        load INTEGER NOT NULL DEFAULT 0
      );
      CREATE TABLE cluster_pins (
        worker_id TEXT COLLATE "C" NOT NULL REFERENCES cluster_workers(id) ON DELETE CASCADE,
        kind TEXT COLLATE "C" NOT NULL CHECK (kind IN ('version', 'layer')),
        id TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (worker_id, kind, id)
      );
      CREATE TABLE cluster_layer_blobs (
        layer_id TEXT COLLATE "C" PRIMARY KEY,
        digest TEXT COLLATE "C" NOT NULL,
        size BIGINT NOT NULL,
        format INTEGER NOT NULL,
        created_at TIMESTAMPTZ NOT NULL DEFAULT now()
      );
      CREATE INDEX cluster_layer_blobs_digest ON cluster_layer_blobs(digest);
      CREATE TABLE cluster_blob_deletions (
        digest TEXT COLLATE "C" PRIMARY KEY,
        due_at TIMESTAMPTZ NOT NULL
      );`,
  },
  {
    version: 2,
    sql: `
      CREATE TABLE cluster_slots (
        worker_id TEXT COLLATE "C" NOT NULL REFERENCES cluster_workers(id) ON DELETE CASCADE,
        tenant_id TEXT COLLATE "C" NOT NULL,
        kind TEXT COLLATE "C" NOT NULL,
        used INTEGER NOT NULL CHECK (used >= 0),
        PRIMARY KEY (tenant_id, kind, worker_id)
      );
      CREATE FUNCTION cluster_admit(worker TEXT, tenant TEXT, what TEXT, quota INTEGER, alive_ms DOUBLE PRECISION) RETURNS BOOLEAN
      LANGUAGE plpgsql AS $fn$
      BEGIN
        -- Held until the calling transaction ends: admissions of one tenant and kind go one at a time.
        PERFORM pg_advisory_xact_lock(hashtextextended('shellbase:quota:' || tenant || '/' || what, 0));
        IF (SELECT COALESCE(SUM(s.used), 0) FROM cluster_slots s JOIN cluster_workers w ON w.id = s.worker_id
            WHERE s.tenant_id = tenant AND s.kind = what AND w.heartbeat_at > now() - make_interval(secs => alive_ms / 1000.0)) >= quota THEN
          RETURN FALSE;
        END IF;
        INSERT INTO cluster_slots (worker_id, tenant_id, kind, used) VALUES (worker, tenant, what, 1)
          ON CONFLICT (tenant_id, kind, worker_id) DO UPDATE SET used = cluster_slots.used + 1;
        RETURN TRUE;
      END
      $fn$;`,
  },
  {
    version: 3,
    sql: `
      ALTER TABLE cluster_workers ADD COLUMN gateway TEXT NOT NULL DEFAULT '';
      CREATE TABLE cluster_leases (
        kind TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL,
        worker_id TEXT COLLATE "C" NOT NULL REFERENCES cluster_workers(id) ON DELETE CASCADE,
        epoch BIGINT NOT NULL,
        PRIMARY KEY (kind, key)
      );
      CREATE INDEX cluster_leases_worker ON cluster_leases(worker_id);`,
  },
  {
    version: 4,
    sql: `
      CREATE TABLE cluster_secrets (
        name TEXT COLLATE "C" PRIMARY KEY,
        value TEXT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL DEFAULT now()
      );`,
  },
  {
    version: 5,
    sql: `
      CREATE TABLE cluster_machine_blobs (
        owner TEXT COLLATE "C" NOT NULL,
        digest TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (owner, digest)
      );
      CREATE INDEX cluster_machine_blobs_digest ON cluster_machine_blobs(digest);
      INSERT INTO cluster_machine_blobs (owner, digest)
        SELECT r.id, f.value->>'digest'
        FROM (SELECT id, spec::jsonb->'stored' AS stored FROM machines UNION ALL SELECT id, spec::jsonb->'stored' FROM machine_snapshots) r,
          LATERAL jsonb_array_elements(jsonb_build_array(r.stored->'ram', r.stored->'state') || (r.stored->'disk')) f
        WHERE jsonb_typeof(r.stored) = 'object' AND f.value->>'digest' IS NOT NULL
        ON CONFLICT DO NOTHING;`,
  },
  {
    version: 6,
    sql: `
      CREATE SEQUENCE cluster_lease_epochs;
      SELECT setval('cluster_lease_epochs', COALESCE((SELECT max(epoch) FROM cluster_leases), 0) + 1, false);`,
  },
  {
    version: 7,
    sql: `
      CREATE OR REPLACE FUNCTION cluster_admit(worker TEXT, tenant TEXT, what TEXT, quota INTEGER, alive_ms DOUBLE PRECISION) RETURNS BOOLEAN
      LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtextextended('shellbase:quota:' || tenant || '/' || what, 0));
        -- The admitting worker reached the database now: its slots count from this moment, for
        -- this admission and for the others' (right after an outage its heartbeat is stale until
        -- the next one, and what it took would not be counted by anyone meanwhile).
        UPDATE cluster_workers SET heartbeat_at = now() WHERE id = worker;
        IF (SELECT COALESCE(SUM(s.used), 0) FROM cluster_slots s JOIN cluster_workers w ON w.id = s.worker_id
            WHERE s.tenant_id = tenant AND s.kind = what AND w.heartbeat_at > now() - make_interval(secs => alive_ms / 1000.0)) >= quota THEN
          RETURN FALSE;
        END IF;
        INSERT INTO cluster_slots (worker_id, tenant_id, kind, used) VALUES (worker, tenant, what, 1)
          ON CONFLICT (tenant_id, kind, worker_id) DO UPDATE SET used = cluster_slots.used + 1;
        RETURN TRUE;
      END
      $fn$;`,
  },
];

import type pg from 'pg';
import { CLUSTER_MIGRATIONS } from './cluster-migrations.js';
import type { Param } from '../sql/db.js';
import type { UsageRow } from '../rows.js';
import { usageInsert } from '../sql/usage.js';
import { checkOut, type PostgresDb } from './postgres-db.js';
import { migrate } from './migrate.js';

/** pg sends a JavaScript array as a Postgres array (`?::text[]`); the shared SqlDb's Param type has no arrays. */
const texts = (xs: Iterable<string>): Param => [...xs] as unknown as Param;
/** How long `exclusive` waits for its lock (its holder's work: a collection, a squash) before it fails. */
const LOCK_WAIT_MS = 10 * 60_000;

export interface WorkerRow {
  id: string;
  address: string;
  load: number;
  /** Milliseconds since its last heartbeat, by the database's clock. */
  silentMs: number;
}

/** The worker holding a lease, and where its API and gateway answer. */
export interface LeaseHolder {
  worker: string;
  address: string;
  gateway: string;
}

export interface LayerBlob {
  layerId: string;
  digest: string;
  size: number;
  format: number;
}

/**
 * What workers share beyond the metadata (cluster-migrations.ts has the tables): who is alive,
 * what each one's running work pins, where each layer's blob is, and mutual exclusion by
 * Postgres advisory locks. Times are the database's (`now()`), never a worker's clock.
 */
export class PostgresCluster {
  /** Resolves once the cluster's tables are current. */
  readonly ready: Promise<void>;

  constructor(private readonly db: PostgresDb) {
    this.ready = db.whenReady().then(() => migrate(db.pool, CLUSTER_MIGRATIONS, 'cluster_schema_version'));
    this.ready.catch(() => undefined); // not unhandled: callers await it
  }

  /** The cluster secret named `name`: `proposed` when none was stored yet (the first caller's wins). */
  async secret(name: string, proposed: string): Promise<string> {
    await this.ready;
    await this.db.run('INSERT INTO cluster_secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING', [name, proposed]);
    const row = await this.db.get<{ value: string }>('SELECT value FROM cluster_secrets WHERE name = ?', [name]);
    return row!.value;
  }

  /** Announces a worker (or announces it again): alive from now. */
  async register(id: string, address: string, gateway = ''): Promise<void> {
    await this.ready;
    await this.db.run(`INSERT INTO cluster_workers (id, address, gateway) VALUES (?, ?, ?)
      ON CONFLICT (id) DO UPDATE SET address = excluded.address, gateway = excluded.gateway, heartbeat_at = now()`, [id, address, gateway]);
  }

  /**
   * Takes the lease of `kind`/`key` for `workerId` when nobody holds it, it holds it already, or
   * its holder's heartbeat lapsed (one statement); a new holder gets a fresh epoch from
   * `cluster_lease_epochs` (never one given before, for any lease). Returns
   * the lease, or the live holder that kept it.
   */
  async claim(kind: string, key: string, workerId: string, aliveMs: number): Promise<{ mine: true; epoch: number } | ({ mine: false } & LeaseHolder)> {
    const won = await this.db.get<{ epoch: number }>(`INSERT INTO cluster_leases (kind, key, worker_id, epoch) VALUES (?, ?, ?, nextval('cluster_lease_epochs'))
      ON CONFLICT (kind, key) DO UPDATE
        SET epoch = CASE WHEN cluster_leases.worker_id = excluded.worker_id THEN cluster_leases.epoch ELSE excluded.epoch END,
            worker_id = excluded.worker_id
        WHERE cluster_leases.worker_id = excluded.worker_id OR NOT EXISTS (SELECT 1 FROM cluster_workers w
          WHERE w.id = cluster_leases.worker_id AND w.heartbeat_at > now() - make_interval(secs => ? / 1000.0))
      RETURNING epoch`, [kind, key, workerId, aliveMs]);
    if (won) return { mine: true, epoch: Number(won.epoch) };
    const holder = await this.owner(kind, key, aliveMs);
    // Gone between the two statements: the caller may try again.
    return holder ?? { mine: false, worker: '', address: '', gateway: '' };
  }

  /** The live worker holding a lease, if any. */
  async owner(kind: string, key: string, aliveMs: number): Promise<({ mine: false } & LeaseHolder) | null> {
    const row = await this.db.get<{ worker_id: string; address: string; gateway: string }>(`SELECT l.worker_id, w.address, w.gateway FROM cluster_leases l JOIN cluster_workers w ON w.id = l.worker_id
      WHERE l.kind = ? AND l.key = ? AND w.heartbeat_at > now() - make_interval(secs => ? / 1000.0)`, [kind, key, aliveMs]);
    return row ? { mine: false, worker: row.worker_id, address: row.address, gateway: row.gateway } : null;
  }

  /** The leases `workerId` holds now, with their epochs. */
  async leasesOf(workerId: string): Promise<{ kind: string; key: string; epoch: number }[]> {
    const rows = await this.db.all<{ kind: string; key: string; epoch: number }>('SELECT kind, key, epoch FROM cluster_leases WHERE worker_id = ?', [workerId]);
    return rows.map((r) => ({ kind: r.kind, key: r.key, epoch: Number(r.epoch) }));
  }

  /** Gives a lease up (only the holder's own). */
  async unclaim(kind: string, key: string, workerId: string): Promise<void> {
    await this.db.run('DELETE FROM cluster_leases WHERE kind = ? AND key = ? AND worker_id = ?', [kind, key, workerId]);
  }

  /**
   * A heartbeat: the worker is alive now, carries `load`, and its running work pins exactly
   * `pins` (replacing what the last heartbeat said). False when the row is gone (another worker
   * found it dead and removed it): the caller registers again.
   */
  async heartbeat(id: string, load: number, pins: { versions: Iterable<string>; layers: Iterable<string> }): Promise<boolean> {
    // One statement, one round trip: a heartbeat under load waits for Postgres once, not five times.
    // Its parts see one snapshot, so pins kept from the last beat are neither deleted nor inserted again.
    const row = await this.db.get<{ n: number }>(`WITH w AS (UPDATE cluster_workers SET heartbeat_at = now(), load = ? WHERE id = ? RETURNING id),
        p AS (SELECT 'version' AS kind, unnest(?::text[]) AS id UNION SELECT 'layer', unnest(?::text[])),
        gone AS (DELETE FROM cluster_pins c USING w WHERE c.worker_id = w.id AND (c.kind, c.id) NOT IN (SELECT kind, id FROM p)),
        added AS (INSERT INTO cluster_pins (worker_id, kind, id) SELECT w.id, p.kind, p.id FROM w, p ON CONFLICT DO NOTHING)
      SELECT count(*) AS n FROM w`, [load, id, texts(pins.versions), texts(pins.layers)]);
    return row!.n > 0;
  }

  /** Workers whose last heartbeat is younger than `aliveMs`, by id. */
  async liveWorkers(aliveMs: number): Promise<WorkerRow[]> {
    const rows = await this.db.all<{ id: string; address: string; load: number; silent_ms: number }>(
      `SELECT id, address, load, EXTRACT(EPOCH FROM now() - heartbeat_at) * 1000 AS silent_ms FROM cluster_workers
       WHERE heartbeat_at > now() - make_interval(secs => ? / 1000.0) ORDER BY id`, [aliveMs]);
    return rows.map((r) => ({ id: r.id, address: r.address, load: Number(r.load), silentMs: Number(r.silent_ms) }));
  }

  /** Removes workers silent for longer than `goneMs` (their pins go with them); returns their ids. */
  async forgetGone(goneMs: number): Promise<string[]> {
    const rows = await this.db.all<{ id: string }>(
      'DELETE FROM cluster_workers WHERE heartbeat_at < now() - make_interval(secs => ? / 1000.0) RETURNING id', [goneMs]);
    return rows.map((r) => r.id).sort();
  }

  /** A worker leaving: its row and pins go at once. */
  async leave(id: string): Promise<void> {
    await this.db.run('DELETE FROM cluster_workers WHERE id = ?', [id]);
  }

  /** What live workers other than `self` pin (as of their last heartbeats). */
  async pinnedElsewhere(self: string, aliveMs: number): Promise<{ versions: Set<string>; layers: Set<string> }> {
    const rows = await this.db.all<{ kind: string; id: string }>(
      `SELECT p.kind, p.id FROM cluster_pins p JOIN cluster_workers w ON w.id = p.worker_id
       WHERE w.id != ? AND w.heartbeat_at > now() - make_interval(secs => ? / 1000.0)`, [self, aliveMs]);
    const out = { versions: new Set<string>(), layers: new Set<string>() };
    for (const r of rows) (r.kind === 'version' ? out.versions : out.layers).add(r.id);
    return out;
  }

  /**
   * Takes a slot of `kind` for the tenant on this worker when the live workers together hold fewer
   * than `quota` (one round trip: `cluster_admit`, cluster-migrations.ts); false otherwise.
   */
  async admit(workerId: string, tenantId: string, kind: string, quota: number, aliveMs: number): Promise<boolean> {
    const row = await this.db.get<{ ok: boolean }>('SELECT cluster_admit(?, ?, ?, ?, ?) AS ok', [workerId, tenantId, kind, quota, aliveMs]);
    return row?.ok === true;
  }

  /** Gives back a slot `admit` took, adding `usage` rows to the ledger in the same statement. */
  async release(workerId: string, tenantId: string, kind: string, usage: readonly UsageRow[] = []): Promise<void> {
    const insert = usage.length ? usageInsert(usage) : null;
    await this.db.run(`${insert ? `WITH added AS (${insert.sql}) ` : ''}UPDATE cluster_slots SET used = used - 1 WHERE tenant_id = ? AND kind = ? AND worker_id = ? AND used > 0`,
      [...(insert?.params ?? []), tenantId, kind, workerId]);
  }

  /** Records where a layer's blob is (a second record of the same layer keeps the first). */
  async recordBlob(b: LayerBlob): Promise<void> {
    await this.db.run(`INSERT INTO cluster_layer_blobs (layer_id, digest, size, format) VALUES (?, ?, ?, ?)
      ON CONFLICT (layer_id) DO NOTHING`, [b.layerId, b.digest, b.size, b.format]);
  }

  /** The blobs of the layers that have one. */
  async blobsOf(layerIds: readonly string[]): Promise<Map<string, LayerBlob>> {
    const out = new Map<string, LayerBlob>();
    if (layerIds.length === 0) return out;
    const rows = await this.db.all<{ layer_id: string; digest: string; size: number; format: number }>(
      'SELECT layer_id, digest, size, format FROM cluster_layer_blobs WHERE layer_id = ANY(?::text[])', [texts(layerIds)]);
    for (const r of rows) out.set(r.layer_id, { layerId: r.layer_id, digest: r.digest, size: Number(r.size), format: Number(r.format) });
    return out;
  }

  /**
   * Forgets the blobs of layers whose rows garbage collection dropped, and schedules their
   * digests for deletion from the object store after `graceMs`.
   */
  async dropBlobs(layerIds: readonly string[], graceMs: number): Promise<number> {
    if (layerIds.length === 0) return 0;
    return this.db.tx(async (db) => {
      const gone = await db.all<{ digest: string }>('DELETE FROM cluster_layer_blobs WHERE layer_id = ANY(?::text[]) RETURNING digest', [texts(layerIds)]);
      const digests = [...new Set(gone.map((g) => g.digest))];
      if (digests.length === 0) return 0;
      await db.run(`INSERT INTO cluster_blob_deletions (digest, due_at) SELECT unnest(?::text[]), now() + make_interval(secs => ? / 1000.0)
        ON CONFLICT (digest) DO UPDATE SET due_at = excluded.due_at`, [texts(digests), graceMs]);
      return digests.length;
    });
  }

  /**
   * Digests whose deletion is due and that no layer and no machine or snapshot names (a layer
   * packed to the same bytes since, or a machine file stored again, keeps its blob: that row is
   * cancelled), at most `limit`.
   */
  async dueBlobDeletions(limit: number): Promise<string[]> {
    await this.db.run(`DELETE FROM cluster_blob_deletions d WHERE EXISTS (SELECT 1 FROM cluster_layer_blobs b WHERE b.digest = d.digest)
      OR EXISTS (SELECT 1 FROM cluster_machine_blobs m WHERE m.digest = d.digest)`);
    const rows = await this.db.all<{ digest: string }>(
      'SELECT digest FROM cluster_blob_deletions WHERE due_at <= now() ORDER BY due_at LIMIT ?', [limit]);
    return rows.map((r) => r.digest);
  }

  /**
   * Of `digests` (blobs found in the object store), queues for deletion after `graceMs` those that
   * no layer and no machine or snapshot names and that are not queued already: uploads whose
   * worker died before recording them. Returns how many it queued.
   */
  async queueOrphanBlobs(digests: readonly string[], graceMs: number): Promise<number> {
    if (digests.length === 0) return 0;
    const rows = await this.db.all<{ digest: string }>(`INSERT INTO cluster_blob_deletions (digest, due_at)
        SELECT d.digest, now() + make_interval(secs => ? / 1000.0) FROM unnest(?::text[]) AS d(digest)
        WHERE NOT EXISTS (SELECT 1 FROM cluster_layer_blobs b WHERE b.digest = d.digest)
          AND NOT EXISTS (SELECT 1 FROM cluster_machine_blobs m WHERE m.digest = d.digest)
      ON CONFLICT (digest) DO NOTHING
      RETURNING digest`, [graceMs, texts(digests)]);
    return rows.length;
  }

  /** Done with a scheduled deletion (the blob is gone). */
  async deletionDone(digest: string): Promise<void> {
    await this.db.run(`DELETE FROM cluster_blob_deletions WHERE digest = ? AND NOT EXISTS (SELECT 1 FROM cluster_layer_blobs WHERE digest = ?)
      AND NOT EXISTS (SELECT 1 FROM cluster_machine_blobs WHERE digest = ?)`, [digest, digest, digest]);
  }

  /** `owner` (a machine's or snapshot's id) names these blobs of machine files too, from now on (before its row does). */
  async holdMachineBlobs(owner: string, digests: readonly string[]): Promise<void> {
    if (digests.length === 0) return;
    await this.db.run(`INSERT INTO cluster_machine_blobs (owner, digest) SELECT ?, unnest(?::text[]) ON CONFLICT DO NOTHING`, [owner, texts(digests)]);
  }

  /**
   * `owner` names only `keep` from now on (none: it is gone). Every blob it let go is scheduled for
   * deletion from the object store after `graceMs` (one statement), whether or not something else
   * still names it: `dueBlobDeletions` cancels those that are named when they fall due. (Checking
   * here would miss a blob that two owners let go at once, each seeing the other still holding it.)
   * Returns how many it let go.
   */
  async releaseMachineBlobs(owner: string, keep: readonly string[], graceMs: number): Promise<number> {
    const rows = await this.db.all<{ digest: string }>(`WITH gone AS (
        DELETE FROM cluster_machine_blobs WHERE owner = ? AND NOT (digest = ANY(?::text[])) RETURNING digest
      )
      INSERT INTO cluster_blob_deletions (digest, due_at)
        SELECT DISTINCT g.digest, now() + make_interval(secs => ? / 1000.0) FROM gone g
      ON CONFLICT (digest) DO UPDATE SET due_at = excluded.due_at
      RETURNING digest`, [owner, texts(keep), graceMs]);
    return rows.length;
  }

  /**
   * Runs `fn` holding the advisory lock named `key` (one holder in the whole cluster), on a
   * connection of its own that holds it until `fn` ends. Without `wait`, returns null at once
   * when another holds it. A lost connection releases the lock: whatever runs under one must
   * stay correct if two ever run at once (it only saves work).
   */
  async exclusive<T>(key: string, fn: () => Promise<T>, { wait = true }: { wait?: boolean } = {}): Promise<T | null> {
    await this.ready;
    const { client, release } = await checkOut(this.db.pool);
    let broken: Error | undefined;
    try {
      this.db.countRoundTrip();
      // A wait for the lock lasts as long as its holder's work (a collection): not bounded by
      // QUERY_TIMEOUT_MS. A lock query that failed (or timed out, still waiting on the server)
      // leaves the connection unusable: it is discarded, never handed out holding the lock later.
      try {
        if (wait) await client.query({ text: 'SELECT pg_advisory_lock(hashtextextended($1, 0))', values: [key], query_timeout: LOCK_WAIT_MS } as pg.QueryConfig);
        else if (!(await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS ok', [key])).rows[0].ok) return null;
      } catch (e) {
        broken = e as Error;
        throw e;
      }
      try {
        return await fn();
      } finally {
        this.db.countRoundTrip();
        await client.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [key]).catch((e: Error) => { broken = e; });
      }
    } finally {
      release(broken);
    }
  }
}

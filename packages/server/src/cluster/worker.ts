import type { Logger } from 'pino';
import type { Cluster, LeaseKind, SlotKind } from '../core/cluster.js';
import type { Pins } from '../core/pins.js';
import type { BlobStore } from '../store/blobs/types.js';
import type { UsageRow } from '../store/metadata/rows.js';
import type { PostgresCluster, WorkerRow } from '../store/metadata/postgres/cluster-store.js';
import { neverSent } from '../store/metadata/postgres/postgres-db.js';
import { ShellbaseError } from '../errors.js';
import { inBackground } from '../util/background.js';
import { newId } from '../util/ids.js';
import { KeyedLock } from '../util/keyed-lock.js';
import { placeQuery, type Peer } from './locality.js';

export interface ClusterWorkerOptions {
  shared: PostgresCluster;
  blobs: BlobStore;
  pins: Pins;
  /** The URL other workers reach this one at, and its gateway at. */
  address: string;
  gateway: string;
  heartbeatMs: number;
  /** How long a blob nothing names any more stays in the object store before it is deleted. */
  blobGraceMs: number;
  /** Work running here now (queries, services, machines): published with each heartbeat. */
  load: () => number;
  log: Logger;
}

/** Attempts after the first to give a slot back while the database cannot be reached. */
const RELEASE_RETRIES = 14;
/** Postgres's SQLSTATE for a row naming a missing row (here: this worker's, removed as gone). */
const FOREIGN_KEY_VIOLATION = '23503';
/** Missed heartbeats after which a worker is treated as gone (its pins lapse, its row is removed). */
const LAPSE_BEATS = 3;
/** Blobs deleted per collection run. */
const DELETE_PAGE = 500;
/** Blobs of the object store looked at per collection run for ones nothing names. */
const ORPHAN_PAGE = 1000;
/**
 * How long a blob that nothing names stays before it is deleted, at least: an upload is recorded
 * only once it is whole (a hibernation's memory waits for its disk's upload), so this is far
 * longer than any upload takes.
 */
const ORPHAN_GRACE_MS = 24 * 3600_000;

/**
 * This process as one worker of a cluster: a row in `cluster_workers` under a fresh id, a
 * heartbeat that publishes what its running work pins (so garbage collection on any worker
 * leaves it alone), locks shared by every worker (Postgres advisory locks, taken in this process
 * through a KeyedLock first so a worker asks Postgres once per key), and the deletion of dropped
 * layers' blobs once their grace period is over (ClusterSnapshotter.remove schedules them).
 *
 * A worker's identity is its row, not a file: two workers never claim each other's data, and a
 * worker that starts again is a new worker (the old row lapses).
 */
export class ClusterWorker implements Cluster {
  readonly workerId = newId('w');
  private timer: NodeJS.Timeout | null = null;
  private beating: Promise<void> | null = null;
  private readonly local = new KeyedLock();
  /** The leases this worker claimed and has not given up, by `kind/key` (one object per claim). */
  private readonly held = new Map<string, { kind: LeaseKind; key: string; epoch: number }>();
  private readonly lostListeners: ((kind: LeaseKind, key: string) => void)[] = [];
  /**
   * When this worker last wrote to the cluster's tables (a heartbeat, a quota slot taken; the time
   * the write was sent), and when a beat last found that too long ago (a pause, a partition).
   */
  private lastContact = Date.now();
  private lapsedAt = 0;
  /** Where `sweepOrphanBlobs` goes on (null: from the first blob). */
  private orphansAfter: string | null = null;

  constructor(private readonly opts: ClusterWorkerOptions) {}

  get aliveMs(): number { return this.opts.heartbeatMs * LAPSE_BEATS; }

  /** The live workers as of the last heartbeat (this one included): what locality places queries over. */
  private peers: Peer[] = [];

  async start(): Promise<void> {
    await this.opts.shared.register(this.workerId, this.opts.address, this.opts.gateway);
    await this.refreshPeers();
    this.timer = setInterval(() => { this.beating ??= inBackground(() => this.beat()).finally(() => { this.beating = null; }); }, this.opts.heartbeatMs);
    this.timer.unref();
    this.opts.log.info({ worker: this.workerId, address: this.opts.address }, 'joined the cluster');
  }

  /** One heartbeat now (tests, and before a collection reads the others' pins). */
  async beat(): Promise<void> {
    const started = Date.now();
    if (started - this.lastContact > this.aliveMs) this.lapsedAt = started;
    try {
      const pins = this.opts.pins.snapshot();
      if (!(await this.opts.shared.heartbeat(this.workerId, this.opts.load(), pins))) {
        this.opts.log.warn({ worker: this.workerId }, 'this worker was taken for gone (its heartbeat lapsed); joining again');
        await this.opts.shared.register(this.workerId, this.opts.address, this.opts.gateway);
        await this.opts.shared.heartbeat(this.workerId, this.opts.load(), pins);
      }
      // Written at `started` at the earliest: what the others judge this worker by.
      this.lastContact = Math.max(this.lastContact, started);
      const took = Date.now() - started;
      if (took > this.opts.heartbeatMs) this.opts.log.warn({ worker: this.workerId, ms: took }, 'a heartbeat took longer than the time between two');
      const gone = await this.opts.shared.forgetGone(this.aliveMs * 10);
      if (gone.length) this.opts.log.warn({ workers: gone }, 'workers gone (no heartbeat)');
      await this.checkLeases();
      await this.refreshPeers();
    } catch (err) {
      this.opts.log.error({ err }, 'heartbeat failed');
    }
  }

  /**
   * Runs `fn`, which writes a row naming this worker; when that fails because this worker's own
   * row is gone (the others took it for gone after a partition or a pause, and removed it with what
   * it held), joins again and runs `fn` once more. What it held is judged at the next heartbeat
   * (its leases are gone: their work stops).
   */
  private async asMember<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      if ((e as { code?: string } | null)?.code !== FOREIGN_KEY_VIOLATION) throw e;
      this.opts.log.warn({ worker: this.workerId }, 'this worker was taken for gone (its row was removed); joining again');
      await this.opts.shared.register(this.workerId, this.opts.address, this.opts.gateway);
      return fn();
    }
  }

  private async refreshPeers(): Promise<void> {
    this.peers = (await this.workers()).map((w) => ({ id: w.id, address: w.address, load: w.load }));
  }

  /**
   * Where a query of the tenant's context runs (locality.ts): the API URL of its preferred worker
   * when that is another live one under `maxLoad`, else null (here). From the last heartbeat's
   * view of the cluster: no round trip.
   */
  preferred(tenantId: string, context: string, maxLoad: number): string | null {
    return placeQuery(`${tenantId}/${context}`, this.workerId, this.peers, maxLoad)?.address ?? null;
  }

  /** A worker did not answer a forwarded request: leave it out until the next heartbeat says otherwise. */
  unreachable(address: string): void {
    this.peers = this.peers.filter((p) => p.address !== address);
  }

  /** Live workers (this one included), by id. */
  workers(): Promise<WorkerRow[]> {
    return this.opts.shared.liveWorkers(this.aliveMs);
  }

  checkAlive(since: number): void {
    const now = Date.now();
    if (now - this.lastContact <= this.aliveMs && this.lapsedAt < since) return;
    throw new ShellbaseError('unavailable', 'this worker was out of touch with the cluster (its heartbeat lapsed): work admitted before is not started', {
      hint: 'retry: the request goes to a worker in touch with the cluster',
    });
  }

  async exclusive<T>(key: string, fn: () => Promise<T>, { wait = true }: { wait?: boolean } = {}): Promise<T | null> {
    if (!wait && this.local.busy(key)) return null;
    return this.local.run(key, () => this.opts.shared.exclusive(key, fn, { wait }));
  }

  pinnedElsewhere(): Promise<{ versions: Set<string>; layers: Set<string> }> {
    return this.opts.shared.pinnedElsewhere(this.workerId, this.aliveMs);
  }

  async admit(tenantId: string, kind: SlotKind, quota: number): Promise<boolean> {
    const sent = Date.now();
    const ok = await this.asMember(() => this.opts.shared.admit(this.workerId, tenantId, kind, quota, this.aliveMs));
    this.lastContact = Math.max(this.lastContact, sent);
    return ok;
  }

  /**
   * Gives a slot back. When the database surely did not get it (down, restarting, unreachable),
   * it is given back later, backing off (1 s, 2 s, … 64 s apart, for about ten minutes), and this
   * resolves: a slot is never given back twice, nor kept by a caller's clean-up that failed.
   */
  async release(tenantId: string, kind: SlotKind, usage?: readonly UsageRow[]): Promise<void> {
    const once = () => this.opts.shared.release(this.workerId, tenantId, kind, usage);
    try {
      await once();
    } catch (e) {
      if (!neverSent(e)) throw e;
      const retry = (attempt: number) => setTimeout(() => {
        once().catch((err: unknown) => {
          if (neverSent(err) && attempt < RELEASE_RETRIES) retry(attempt + 1);
          else this.opts.log.error({ err, tenant: tenantId, kind }, 'giving a quota slot back failed');
        });
      }, 1000 * 2 ** Math.min(attempt, 6)).unref();
      retry(0);
    }
  }

  async claim(kind: LeaseKind, key: string): Promise<{ mine: true; epoch: number } | { mine: false; gateway: string }> {
    const lease = await this.asMember(() => this.opts.shared.claim(kind, key, this.workerId, this.aliveMs));
    if (lease.mine) this.held.set(`${kind}/${key}`, { kind, key, epoch: lease.epoch });
    return lease;
  }

  leaseLost(listener: (kind: LeaseKind, key: string) => void): void {
    this.lostListeners.push(listener);
  }

  /**
   * The leases this worker believes it holds that the database gives to another worker (or to
   * none, or at another epoch): each is forgotten and its listeners told. Claims and unclaims made
   * meanwhile are left alone (an entry is judged only if it is the same claim before and after).
   */
  private async checkLeases(): Promise<void> {
    if (this.held.size === 0) return;
    const before = new Map(this.held);
    const rows = await this.opts.shared.leasesOf(this.workerId);
    const have = new Set(rows.map((r) => `${r.kind}/${r.key}/${r.epoch}`));
    for (const [id, lease] of before) {
      if (have.has(`${id}/${lease.epoch}`) || this.held.get(id) !== lease) continue;
      this.held.delete(id);
      this.opts.log.warn({ worker: this.workerId, kind: lease.kind, key: lease.key, epoch: lease.epoch }, 'a lease of this worker was taken over by another');
      for (const l of this.lostListeners) l(lease.kind, lease.key);
    }
  }

  async elsewhere(kind: LeaseKind, key: string): Promise<{ api: string; gateway: string } | null> {
    const holder = await this.opts.shared.owner(kind, key, this.aliveMs);
    return holder && holder.worker !== this.workerId && holder.gateway ? { api: holder.address, gateway: holder.gateway } : null;
  }

  unclaim(kind: LeaseKind, key: string): Promise<void> {
    this.held.delete(`${kind}/${key}`);
    return this.opts.shared.unclaim(kind, key, this.workerId);
  }

  holdBlobs(owner: string, digests: readonly string[]): Promise<void> {
    return this.opts.shared.holdMachineBlobs(owner, digests);
  }

  async releaseBlobs(owner: string, keep: readonly string[]): Promise<void> {
    await this.opts.shared.releaseMachineBlobs(owner, keep, this.opts.blobGraceMs);
  }

  /**
   * Looks at the next page of the object store's blobs (a cursor that goes round, one page per
   * call) and queues those nothing names for deletion after a day (or the grace period, if
   * longer): what a worker that died between an upload and its record left. One named by then
   * stays (the queue cancels it).
   */
  async sweepOrphanBlobs(): Promise<number> {
    const page = await this.opts.blobs.list({ ...(this.orphansAfter ? { after: this.orphansAfter } : {}), limit: ORPHAN_PAGE });
    this.orphansAfter = page.length === ORPHAN_PAGE ? page[page.length - 1].digest : null;
    return this.opts.shared.queueOrphanBlobs(page.map((b) => b.digest), Math.max(this.opts.blobGraceMs, ORPHAN_GRACE_MS));
  }

  async deleteDueBlobs(): Promise<number> {
    let n = 0;
    for (const digest of await this.opts.shared.dueBlobDeletions(DELETE_PAGE)) {
      await this.opts.blobs.delete(digest);
      await this.opts.shared.deletionDone(digest);
      n++;
    }
    return n;
  }

  /** Leaves the cluster: the row and its pins go at once. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.beating;
    await this.opts.shared.leave(this.workerId).catch((err: unknown) => this.opts.log.warn({ err }, 'leaving the cluster failed'));
  }
}

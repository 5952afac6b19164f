import type { UsageRow } from '../store/metadata/rows.js';

/**
 * What the engine asks of the other workers when it runs as one worker of a cluster
 * (cluster/worker.ts implements it over Postgres); absent in the embedded default, where one
 * process is the whole system and the in-process pins and locks are enough.
 */
/** What quota slots count: running queries (`concurrentQueries`), awake services (`runningServices`), machines holding memory (`runningMachines`). */
export type SlotKind = 'query' | 'service' | 'machine';
/** What a lease places on one worker: a service (key: its token), a machine (key: its id). */
export type LeaseKind = 'service' | 'machine';

export interface Cluster {
  /** This worker's id (a fresh one each start). */
  readonly workerId: string;
  /**
   * Runs `fn` while no other worker (and no other caller here) holds `key`; without `wait`,
   * null at once when one does. Work run under it must stay correct if two ever ran at once
   * (a lost database connection releases the lock): it only saves duplicated work.
   */
  exclusive<T>(key: string, fn: () => Promise<T>, options?: { wait?: boolean }): Promise<T | null>;
  /** What running work on the other live workers pins, as of their last heartbeats. */
  pinnedElsewhere(): Promise<{ versions: Set<string>; layers: Set<string> }>;
  /**
   * Takes one of the tenant's `quota` slots of `kind` counted over every live worker; false when
   * all are taken. Every true is matched by one `release`.
   */
  admit(tenantId: string, kind: SlotKind, quota: number): Promise<boolean>;
  /**
   * Throws `unavailable` when this worker was out of touch with the cluster's tables (no
   * heartbeat or slot written) for longer than a heartbeat's lapse at any time since `since`, or
   * is now: the other workers stopped counting its slots meanwhile, so work admitted then must not
   * start (it could run beside what they admitted in its place). Checked locally: no round trip.
   */
  checkAlive(since: number): void;
  /**
   * Gives a slot back; `usage`: ledger rows written with it (one round trip for both). A release
   * the database surely did not get (it is down or unreachable) is made again later, and this
   * resolves; other failures reject.
   */
  release(tenantId: string, kind: SlotKind, usage?: readonly UsageRow[]): Promise<void>;
  /**
   * Places a service or machine on this worker (a lease in Postgres, taken from a worker whose
   * heartbeat lapsed), or says which live worker's gateway holds it.
   */
  claim(kind: LeaseKind, key: string): Promise<{ mine: true; epoch: number } | { mine: false; gateway: string }>;
  /** Where a service or machine runs now, when another live worker holds it (that worker's API and gateway URLs). */
  elsewhere(kind: LeaseKind, key: string): Promise<{ api: string; gateway: string } | null>;
  unclaim(kind: LeaseKind, key: string): Promise<void>;
  /**
   * Tells `listener` of each lease this worker claimed and then found taken over by another worker
   * (checked at every heartbeat: after a pause or partition that outlasted its heartbeat). What
   * was committed under it since is refused by its epoch (LeaseFence); the listener stops the work.
   */
  leaseLost(listener: (kind: LeaseKind, key: string) => void): void;
  /**
   * Machines' files in the object store: `owner` (a machine's or snapshot's id) names these blobs
   * from now on, as well as those it named. Called before its row names them, so that no
   * collection deletes a blob a row names.
   */
  holdBlobs(owner: string, digests: readonly string[]): Promise<void>;
  /**
   * `owner` names only `keep` from now on (none: it is gone). Blobs that nothing names any more
   * (no other machine or snapshot, no layer) are deleted after the grace period.
   */
  releaseBlobs(owner: string, keep: readonly string[]): Promise<void>;
  /** Deletes the blobs whose grace period is over; returns how many went. */
  deleteDueBlobs(): Promise<number>;
  /**
   * Queues the object store's blobs that nothing names (an upload whose worker died before its
   * record) for deletion after a day, a page per call; returns how many it queued.
   */
  sweepOrphanBlobs(): Promise<number>;
}

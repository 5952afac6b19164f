import type { NetworkConnection, NetworkPolicy } from '@shellbase/protocol';
import type { Change } from '../snapshotter/types.js';
import type {
  ApiKeyRow, CommitVersionOptions, ContextChanges, ContextRow, DeliveryOutcome, DeliveryRow, DueDelivery, EgressLogRow, EventFilter, EventRow, NewEvent, WebhookRow, ImageRow, LayerRow, LeaseFence, MachineRow, NewVersion, ServiceRow, SnapshotRow, TenantQuotas, TenantRow, UsageGrouping, UsageRow,
  UsageTotals, VersionRow,
} from './rows.js';

export type * from './rows.js';

/**
 * The metadata store: one repository per aggregate, over one database. SQLite
 * (embedded) and Postgres (cluster) are dialects of one implementation
 * (store/metadata/sql, against sql/db.ts). Every method is atomic on its own.
 *
 * - A **version** is immutable in content: `layers` (bottom first) may be
 *   rewritten to an equal representation (squash), nothing else changes.
 *   Its change set (`changes`: the paths it changed over `parent`, null for
 *   an image) can be large, so it is read only where needed.
 * - A **context** is a tenant's named pointer to a head version. Heads move
 *   only by compare-and-set (`versions.commit` with `moveHead`).
 * - Aggregates are the store's: how many versions refer to each layer (per
 *   tenant), a tenant's stored bytes, usage totals. Nothing walks all history
 *   in JavaScript: garbage is selected by SQL, a page at a time.
 */
export interface MetadataStore {
  readonly tenants: TenantRepository;
  readonly contexts: ContextRepository;
  readonly versions: VersionRepository;
  readonly usage: UsageRepository;
  readonly services: ServiceRepository;
  readonly machines: MachineRepository;
  readonly egressLog: EgressLogRepository;
  readonly images: ImageRepository;
  readonly buildCache: BuildCacheRepository;
  readonly events: EventRepository;
  readonly webhooks: WebhookRepository;
  /** Makes every committed transaction durable (survives power loss, not only a crash). */
  sync(): Promise<void>;
  /**
   * Writes the whole store as of its last committed transaction to a new SQLite file while it
   * keeps serving (the embedded store's online copy, off the event loop); absent where the store
   * cannot (Postgres: its own tools back it up).
   */
  snapshot?(file: string): Promise<void>;
  /**
   * Returns up to `maxPages` free pages to the file system (SQLite's incremental vacuum: one
   * synchronous statement, ~0.03–0.05 ms a page) and answers how many free pages are left;
   * a no-op answering 0 elsewhere.
   */
  reclaim(maxPages: number): Promise<number>;
  close(): Promise<void>;
}

export interface TenantRepository {
  /** Inserts a tenant; false if the name is taken. */
  create(row: TenantRow): Promise<boolean>;
  list(): Promise<TenantRow[]>;
  /** Tenant ids after `after` in id order, at most `limit` (collection pages through them). */
  ids(after: string | null, limit: number): Promise<string[]>;
  get(id: string): Promise<TenantRow | null>;
  byName(name: string): Promise<TenantRow | null>;
  admin(): Promise<TenantRow | null>;
  setQuotas(id: string, quotas: TenantQuotas | undefined): Promise<void>;
  setNetwork(id: string, network: NetworkPolicy | null): Promise<void>;
  addKey(tenantId: string, keyHash: string): Promise<void>;
  /** The tenant a key hash belongs to, if the key exists and is not revoked. */
  byKey(keyHash: string): Promise<TenantRow | null>;
  listKeys(tenantId: string): Promise<ApiKeyRow[]>;
  /** Revokes one key (by id) or, without an id, every key of the tenant; the number revoked. */
  revokeKeys(tenantId: string, keyId?: string): Promise<number>;
  /** Bytes of the distinct layers a tenant's versions hold (a shared layer counts once): a counter, O(1). */
  storedBytes(tenantId: string): Promise<number>;
  /** Every tenant's stored bytes together. */
  totalStoredBytes(): Promise<number>;
}

/** A context with its head version and its services, read together (one statement). */
export interface ContextState {
  context: ContextRow;
  /** Null only when the head's row is missing (a damaged store). */
  head: VersionRow | null;
  services: ServiceRow[];
}

export interface ContextRepository {
  get(tenantId: string, name: string): Promise<ContextRow | null>;
  /** The context, its head version and its services as of one moment (what a query starts from). */
  state(tenantId: string, name: string): Promise<ContextState | null>;
  /** Only the context's head version (null: no such context, or its head's row is missing), one statement: what a mount shows. */
  head(tenantId: string, name: string): Promise<VersionRow | null>;
  list(tenantId: string): Promise<ContextRow[]>;
  count(tenantId: string): Promise<number>;
  /** Inserts a context; false if the name is taken. */
  create(row: ContextRow): Promise<boolean>;
  /** Deletes a context and its services; its versions stay (forks may share them) but no longer name it. */
  delete(tenantId: string, name: string): Promise<boolean>;
  /** Sets (or, with null, drops) a context's own egress policy; false if there is no such context. */
  setNetwork(tenantId: string, name: string, network: NetworkPolicy | null): Promise<boolean>;
  /**
   * Changes what `changes` names of a context (its head only if it is still
   * `head.expected`: compare-and-set); false if the context does not exist or
   * its head moved (then nothing changed).
   */
  update(tenantId: string, name: string, changes: ContextChanges): Promise<boolean>;
}

/** How much history a tenant keeps (engine/gc.ts). */
export interface Retention {
  /** Versions created before this instant (ISO time) may go. */
  cutoff: string;
  /** Versions within this many steps of a head (or a kept unattached version) stay whatever their age. */
  keepVersions: number;
}

export interface DropResult {
  /** Version rows deleted. */
  versions: number;
  /** Layer rows deleted (no version refers to them any more): their trees are the caller's to remove. */
  layers: LayerRow[];
  /** Layers no version refers to any more, kept (with their rows) because running work uses them. */
  deferred: number;
}

export interface VersionRepository {
  /**
   * Inserts the version (and layer) and moves the head, all or nothing; false
   * if the head moved. Without `moveHead` the version is unattached (a
   * conflict, or work whose context is gone).
   */
  commit(options: CommitVersionOptions): Promise<boolean>;
  /**
   * Several commits (each as `commit` makes it) in one transaction: every version inserted and
   * every head moved, or (false) none of it, when any head moved or any layer went.
   */
  commitAll(options: readonly CommitVersionOptions[]): Promise<boolean>;
  get(id: string): Promise<VersionRow | null>;
  /** The paths a version changed over its parent; null for an image (or an unknown version). */
  changes(id: string): Promise<Change[] | null>;
  /** `id` and its ancestors, newest first. */
  lineage(id: string, limit: number): Promise<VersionRow[]>;
  /** Makes sure an image's root version and layer rows exist. */
  ensureImage(version: NewVersion, layer: LayerRow): Promise<void>;
  /** The image layers versions refer to. */
  imageLayers(): Promise<string[]>;
  /** Every layer row (image layers too), by id: what a backup copies. */
  layers(): Promise<LayerRow[]>;
  /** Which of `ids` have a layer row (crash recovery keeps these trees). */
  knownLayers(ids: readonly string[]): Promise<Set<string>>;
  /** Bytes of the given layers (images count 0). */
  layerBytes(ids: readonly string[]): Promise<number>;
  /**
   * Rewrites versions whose layers start with `prefix` to start with
   * `replacement` (a squash); the number rewritten. With `from` (the version
   * whose layers are the prefix), its descendants that start with it; without,
   * every version of the tenant that does.
   */
  replaceLayerPrefix(prefix: string[], replacement: string[], layer: LayerRow, from?: string | null): Promise<number>;
  /**
   * Up to `limit` versions of a tenant garbage collection may drop, oldest
   * first (the rules: engine/gc.ts, `garbage`, the reference model):
   * - old ones (created before the cutoff) more than keepVersions steps from
   *   every root (a head, or an unattached version still owned by a context
   *   and newer than the cutoff);
   * - versions no context owns any more that no root reaches;
   * never a head, a version in `pinned`, or a descendant of one.
   */
  garbage(tenantId: string, retention: Retention, pinned: readonly string[], limit: number): Promise<string[]>;
  /**
   * In one transaction: deletes the versions `ids` except those that are a
   * context's head by then, cuts the links that pointed at them (history
   * starts at the survivor), and deletes the rows of the non-image layers no
   * version refers to any more, except `keepLayers`.
   */
  drop(ids: readonly string[], keepLayers: ReadonlySet<string>): Promise<DropResult>;
  /** Layer rows no version refers to (left by an earlier drop while pinned), except `keep`, deleted now; at most `limit`. */
  dropUnreferencedLayers(keep: ReadonlySet<string>, limit: number): Promise<DropResult>;
  /** The imported layer whose content has this digest (an OCI diff_id), if any. */
  layerByDigest(digest: string): Promise<LayerRow | null>;
  /**
   * Records a layer no version refers to yet (an imported layer, before its
   * image's root version): garbage collection may take it unless it is pinned.
   */
  addLayer(layer: LayerRow): Promise<void>;
  /** Whether any version of the tenant refers to the layer. */
  tenantRefersTo(tenantId: string, layerId: string): Promise<boolean>;
}

/**
 * OCI images tenants named by reference. An image's root version belongs to
 * its tenant; garbage collection treats it as a root (as a head) while an
 * image row names it.
 */
export interface ImageRepository {
  /** Records the image named `row.ref` (replacing what it named); `version`, when given, is a new root version inserted in the same transaction. */
  put(row: ImageRow, version?: NewVersion): Promise<void>;
  get(tenantId: string, ref: string): Promise<ImageRow | null>;
  /** An image of the tenant with this manifest digest (its root version serves another reference to the same image). */
  byDigest(tenantId: string, digest: string): Promise<ImageRow | null>;
  /** A tenant's images by reference. */
  list(tenantId: string): Promise<ImageRow[]>;
  delete(tenantId: string, ref: string): Promise<boolean>;
}

/**
 * The build cache: a build step's key (its parent version, instruction and
 * inputs, hashed: engine/builds) to the version it made, per tenant. Entries
 * go with their versions when garbage collection drops them.
 */
export interface BuildCacheRepository {
  get(tenantId: string, key: string): Promise<string | null>;
  /** Records (or replaces) the version a key made. */
  put(tenantId: string, key: string, version: string, createdAt: string): Promise<void>;
}

export interface UsageRepository {
  record(row: UsageRow): Promise<void>;
  /** Usage of a tenant in [from, to), summed per context, kind, day or hour (rolled-up rows count by their hour). */
  totals(tenantId: string, from: string, to: string, groupBy: UsageGrouping): Promise<UsageTotals[]>;
  /** Folds ledger rows older than `before` into hourly rows (per tenant, context and kind), at most `limit` rows; how many. */
  rollUp(before: string, limit: number): Promise<number>;
}

export interface ServiceRepository {
  /** Inserts a service; false if the context already has one of that name. */
  create(row: ServiceRow): Promise<boolean>;
  get(tenantId: string, context: string, name: string): Promise<ServiceRow | null>;
  list(tenantId: string, context: string): Promise<ServiceRow[]>;
  byToken(token: string): Promise<ServiceRow | null>;
  delete(tenantId: string, context: string, name: string): Promise<boolean>;
  /** Replaces a service's spec (its sharing); false if there is no such service. */
  update(row: ServiceRow): Promise<boolean>;
  /** A tenant's services shared beyond their context (`spec.share` set). */
  shared(tenantId: string): Promise<ServiceRow[]>;
}

export interface MachineRepository {
  create(row: MachineRow): Promise<void>;
  get(tenantId: string, id: string): Promise<MachineRow | null>;
  /**
   * A machine of any tenant, by id alone: for traffic that names a machine but carries no API key
   * (the E2B-compatible API's envd and port traffic, checked then against the sandbox's own tokens).
   */
  find(id: string): Promise<MachineRow | null>;
  /** A tenant's machines, or every machine (crash recovery). */
  list(tenantId?: string): Promise<MachineRow[]>;
  /**
   * Writes state and spec (and the port tokens the spec names). With `fence` (cluster mode: the
   * machine's lease as this worker holds it), only while that lease is still this worker's at its
   * epoch; else `failed_precondition` and nothing is written.
   */
  update(row: MachineRow, fence?: LeaseFence): Promise<void>;
  /** `fence`: as for `update` (cluster mode: nothing is deleted once the lease moved on). */
  delete(tenantId: string, id: string, fence?: LeaseFence): Promise<boolean>;
  byPortToken(token: string): Promise<{ machine: MachineRow; port: number } | null>;
  createSnapshot(row: SnapshotRow): Promise<void>;
  getSnapshot(tenantId: string, id: string): Promise<SnapshotRow | null>;
  listSnapshots(tenantId?: string): Promise<SnapshotRow[]>;
  deleteSnapshot(tenantId: string, id: string): Promise<boolean>;
}

export interface EgressLogRepository {
  record(rows: readonly EgressLogRow[]): Promise<void>;
  /** A context's most recent connections, newest first. */
  recent(tenantId: string, context: string, limit: number): Promise<NetworkConnection[]>;
  /** Deletes entries older than `before`, at most `limit`; how many. */
  trim(before: string, limit: number): Promise<number>;
}

/**
 * Events of every tenant, in one increasing sequence (ids), trimmed by age. Appending an event
 * also queues a delivery of it to each enabled webhook of its tenant that takes its kind, in the
 * same transaction: an event stored is an event every such webhook will be sent.
 */
export interface EventRepository {
  /** Stores the events in one transaction (with their deliveries); they come back with their ids, in order, and how many deliveries were queued. */
  append(events: readonly NewEvent[]): Promise<{ events: EventRow[]; deliveries: number }>;
  /** A tenant's events after `afterId`, oldest first, at most `limit`, passing `filter`. */
  since(tenantId: string, afterId: number, limit: number, filter?: EventFilter): Promise<EventRow[]>;
  /** A tenant's events newest first (or oldest first with `ascending`), skipping `offset`: E2B's lifecycle API pages this way. */
  page(tenantId: string, filter: EventFilter, offset: number, limit: number, ascending: boolean): Promise<EventRow[]>;
  /** Every tenant's events with an id above `afterId`, oldest first, at most `limit` (other workers' events, for this one's listeners). */
  recent(afterId: number, limit: number): Promise<EventRow[]>;
  /** Every tenant's events with an id at most `throughId` and a time at or after `sinceTime`, at most `limit` (rows that became visible after higher ids). */
  late(throughId: number, sinceTime: string, limit: number): Promise<EventRow[]>;
  /** The highest id stored (0 for none). */
  lastId(): Promise<number>;
  /** Deletes settled deliveries made before `before`, then events older than that whose deliveries are all settled, at most `limit` of each; how many events. */
  trim(before: string, limit: number): Promise<number>;
}

/** Tenants' webhooks and their deliveries. */
export interface WebhookRepository {
  create(row: WebhookRow): Promise<void>;
  list(tenantId: string, format?: WebhookRow['format']): Promise<WebhookRow[]>;
  get(tenantId: string, id: string): Promise<WebhookRow | null>;
  /** Replaces url, kinds, name, secret and enabled; false if there is no such webhook. */
  update(row: WebhookRow): Promise<boolean>;
  /** Deletes a webhook and its deliveries; false if there is none. */
  delete(tenantId: string, id: string): Promise<boolean>;
  /**
   * Up to `limit` pending deliveries due at `now` and not claimed by another worker until then,
   * claimed until `claimUntil` (a worker that dies with a claim leaves it to the next after that).
   * A due delivery whose webhook or event is gone is marked failed instead.
   */
  claimDue(now: string, claimUntil: string, limit: number): Promise<DueDelivery[]>;
  /** Records an attempt's outcome and releases the claim. */
  settle(id: number, outcome: DeliveryOutcome): Promise<void>;
  /** A webhook's deliveries, newest first. */
  deliveries(tenantId: string, webhookId: string, limit: number): Promise<DeliveryRow[]>;
  /** The earliest time a pending delivery is due (a claimed one: when its claim runs out; null when none is pending). */
  nextDue(): Promise<string | null>;
}

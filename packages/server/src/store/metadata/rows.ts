import type { ContextConfig, DeliveryState, EventKind, ContextDefaults, ImageConfig, MachineState, NetworkConnection, NetworkPolicy, ServiceAccess, ServiceShare, VersionCause } from '@shellbase/protocol';
import type { Change } from '../snapshotter/types.js';

/** The rows of the metadata store (store/metadata/types.ts has its repositories). */
/** A tenant's own quotas; what is absent falls back to the server's defaults. */
export interface TenantQuotas {
  contexts?: number;
  storedBytes?: number;
  concurrentQueries?: number;
  /** Services running (awake) at once. */
  runningServices?: number;
  /** Machines running (or paused) at once. */
  runningMachines?: number;
  /** Cores all its sandboxes may use together. */
  tenantCpus?: number;
  /** Ceilings on what one query may ask for. */
  memoryMb?: number;
  pids?: number;
  cpus?: number;
  diskMb?: number;
  outputBytes?: number;
  timeoutMs?: number;
  /** History older than this many days is dropped by garbage collection (0: only the newest versions stay). */
  retentionDays?: number;
  /** Versions of each context's history that stay whatever their age (at least 1: the head). */
  keepVersions?: number;
}

export interface TenantRow {
  id: string;
  name: string;
  admin: boolean;
  quotas?: TenantQuotas;
  /** Its egress policy; absent: the server's default (SHELLBASE_EGRESS). */
  network?: NetworkPolicy;
  createdAt: string;
}

export interface ApiKeyRow {
  /** `k_` and the first 12 hex digits of the key's hash: names a key without revealing it. */
  id: string;
  createdAt: string;
  revokedAt: string | null;
}

/** One row of the usage ledger. */
export interface UsageRow {
  tenantId: string;
  context: string;
  kind: 'query' | 'service' | 'machine';
  createdAt: string;
  cpuMs: number;
  wallMs: number;
  memoryPeakBytes: number;
  bytesWritten: number;
  exitCode: number | null;
  /** Bytes sent and received through the egress proxy. */
  egressBytes?: number;
  ingressBytes?: number;
  /** Of a service run's or machine segment's wall time, the part with some use in progress (billed). */
  activeMs?: number;
}

/** How usage is summed: per context, per kind, or per UTC day or hour (keys `YYYY-MM-DD`, `YYYY-MM-DDTHH`). */
export type UsageGrouping = 'context' | 'kind' | 'day' | 'hour';

export interface UsageTotals {
  key: string;
  queries: number;
  /** Seconds services ran (their rows' wall time). */
  serviceSeconds: number;
  /** Seconds machines ran (paused and hibernated ones cost only stored bytes). */
  machineSeconds: number;
  /** Machine seconds weighted by memory (MiB): a machine row's memory_peak_bytes is its guest RAM. */
  machineMbSeconds: number;
  cpuMs: number;
  wallMs: number;
  bytesWritten: number;
  egressBytes: number;
  ingressBytes: number;
  serviceActiveSeconds: number;
  machineActiveSeconds: number;
}

export interface ContextRow {
  tenantId: string;
  name: string;
  head: string;
  image: string;
  /** Its own egress policy (a fork inherits it); absent: the tenant's. */
  network?: NetworkPolicy;
  createdAt: string;
  updatedAt: string;
  /** Persisted as JSON with `format: 1`. */
  defaults?: ContextDefaults;
  /** Persisted as JSON with `format: 1`. */
  config?: ContextConfig;
}

/** What a build or a PATCH changes of a context, besides (maybe) its head. */
export interface ContextChanges {
  head?: { expected: string; to: string };
  image?: string;
  defaults?: ContextDefaults;
  config?: ContextConfig;
  updatedAt: string;
}

/** An OCI image's config as stored (JSON with `format: 1`): the wire's, and its layers' diff_ids. */
export interface StoredImageConfig extends ImageConfig {
  format: 1;
  /** The uncompressed layers' digests, bottom first (the config's `rootfs.diff_ids`). */
  diffIds: string[];
}

/**
 * An OCI image a tenant pulled or imported under a reference: a name for a
 * root version of the tenant's, which garbage collection keeps while an image
 * names it (and, as any version, while a context's versions stand on it).
 */
export interface ImageRow {
  tenantId: string;
  /** Normalized reference (images/ids.ts). */
  ref: string;
  /** Digest of its manifest. */
  digest: string;
  version: string;
  config: StoredImageConfig;
  bytes: number;
  createdAt: string;
}

export interface VersionRow {
  id: string;
  tenantId: string;
  parent: string | null;
  /** For a merge: the merged source's head, a second parent. */
  merged?: string | null;
  /**
   * The context it was committed for while that context exists (null for
   * images and once the context is deleted): owns versions no head reaches,
   * such as conflicts.
   */
  context?: string | null;
  /** Greater than every parent's depth (the image version is 0); orders lineage walks. */
  depth: number;
  layers: string[];
  cause: VersionCause;
  bytes: number;
  createdAt: string;
}

/** A version as written: with its change set. */
export interface NewVersion extends VersionRow {
  changes: Change[] | null;
}

export interface LayerRow {
  id: string;
  /** A built-in image's, a sandbox's or writer's, a squash's, or one imported from an OCI image. */
  kind: 'image' | 'exec' | 'squash' | 'import';
  bytes: number;
  createdAt: string;
  /** An imported layer's content: its OCI diff_id (the uncompressed tar's digest), by which it is found again. */
  digest?: string;
}

export interface CommitVersionOptions {
  version: NewVersion;
  /** A new layer the version introduces (recorded in the same transaction). */
  layer?: LayerRow;
  /** Move this context's head to the version if it still equals `expectedHead`. */
  moveHead?: { tenantId: string; context: string; expectedHead: string };
  /**
   * Commit only if every layer the version names (but `layer`) still has its row: a caller that
   * did not re-read the parent (whose layers a squash may have rewritten, and collection then
   * dropped) learns so by a false, as from a moved head.
   */
  requireLayers?: boolean;
  /** Work done under a cluster lease: committed only while the lease is still `worker`'s at `epoch`. */
  fence?: LeaseFence;
}

/**
 * A cluster lease (`cluster_leases`) as a fencing token: a worker whose lease was taken over (its
 * heartbeat lapsed, say in a partition) holds an epoch that no longer matches, and what it commits
 * under it is refused (`failed_precondition`). The lease row is read in the commit's transaction
 * (FOR SHARE: a takeover waits for the commit, or the commit sees the takeover).
 */
export interface LeaseFence {
  kind: string;
  key: string;
  worker: string;
  epoch: number;
}

/**
 * What a service runs, persisted as JSON with `format`. Format 2 added `access`, `network` and
 * `share` (format 1 reads as access "url", unshared); format 3 is format 2 with `mounts` (written
 * only when it has some, so a server that does not know mounts refuses it rather than run
 * without them).
 */
export interface ServiceSpec {
  format: 2 | 3;
  command: string | string[];
  port: number;
  env: Record<string, string>;
  idleTimeoutMs: number;
  startTimeoutMs: number;
  limits: { memoryMb?: number; pids?: number; cpus?: number; diskMb?: number };
  /** `key`: the gateway wants the tenant's API key as well as the URL's token. */
  access: ServiceAccess;
  /** Narrows the context's egress policy for this service. */
  network?: NetworkPolicy;
  /** Who else reaches it by name (`{service}.{context}.internal`): every context of the tenant, or these; absent: its own context only. */
  share?: ServiceShare;
  /** Contexts mounted into its sandbox (format 3). */
  mounts?: { context: string; path: string; version?: string; readOnly: boolean }[];
}

export interface ServiceRow {
  tenantId: string;
  context: string;
  name: string;
  /** Unguessable; names the service in gateway URLs. */
  token: string;
  spec: ServiceSpec;
  createdAt: string;
}

/**
 * What a machine is made of and made from, and what its snapshots keep for the machines they
 * restore. Format 2 added `diskGb` (a format-1 spec is read as format 2 with `diskGb: 8`, the one
 * size disks had then: store/metadata/sql/machines.ts) and the optional `network`.
 */
export interface MachineShape {
  /** 3: may carry `ramPadKb` (older servers refuse it rather than restore into RAM of another size). */
  format: 2 | 3;
  image: string;
  context?: string;
  version?: string;
  memoryMb: number;
  /** KiB of RAM past `memoryMb`, where the host's QEMU needs it for a sound live copy (machines/vm/live-copy.ts); absent: none. */
  ramPadKb?: number;
  cpus: number;
  /** The disk's size as the guest sees it (GiB). */
  diskGb: number;
  idleTimeoutMs: number;
  /** The request's narrowing of the egress policy (absent: its context's, or its tenant's). */
  network?: NetworkPolicy;
  /**
   * Variables every command its agent runs gets, under the command's own: those of the host's
   * authorities its disk was made with (trust/). Forks and snapshots keep them with the disk.
   */
  guestEnv?: Record<string, string>;
  /**
   * Contexts copied into its guest at a path (machines/mounts.ts), each with the version its copy
   * holds; forks and snapshots keep them with the disk and memory that hold the copies.
   */
  mounts?: MachineMount[];
}

/** A context copied into a machine: the version its copy holds (the one it was made with, or its last commit there). */
export interface MachineMount {
  context: string;
  path: string;
  readOnly: boolean;
  version: string;
}

/** A machine as persisted (spec is JSON with `format`); its process lives in the server, not here. */
export interface MachineSpec extends MachineShape {
  /** The snapshot it was restored from (forks and restores). */
  snapshot?: string;
  /** Its disk's qcow2 chain, writable top first. */
  disk: string[];
  /** Exposed guest ports; each token names one in gateway URLs; `access: "key"` wants the tenant's API key too. */
  ports: { port: number; token: string; access?: 'key' }[];
  /**
   * What other APIs keep about the machine, by the API's name (compat/e2b keeps E2B's sandbox
   * under `e2b`, in a format of its own): stored with the row and never read by the machines core;
   * forks, snapshots and restores do not inherit it.
   */
  extensions?: Record<string, unknown>;
  /** Cluster mode, while it is hibernated: its memory and disk in the object store (any worker restores it). */
  stored?: StoredMachineFiles;
}

/** One file of a machine in the object store: the blob of a packed tree (store/blobs/pack.ts) holding it as `name`. */
export interface StoredFile {
  digest: string;
  /** The file's name in its pack, which says what it is: `disk.qcow2`, `disk.raw`, `ram`, `state.bin`. */
  name: string;
}

/**
 * A machine's memory and disk in the object store (cluster mode): a hibernated machine's, or a
 * snapshot's. `disk` is its qcow2 chain, writable top first, each file's backing being the next
 * (the paths inside the files are those of the worker that stored them: a restoring worker
 * rebases them onto its own copies). `id` names this one storing of it.
 */
export interface StoredMachineFiles {
  format: 1;
  id: string;
  ram: StoredFile;
  state: StoredFile;
  disk: StoredFile[];
}


export type MachineRowState = MachineState;

export interface MachineRow {
  id: string;
  tenantId: string;
  state: MachineRowState;
  spec: MachineSpec;
  createdAt: string;
}

/** A machine frozen at one instant: RAM file, device state, disk chain (read-only from then on). */
export interface SnapshotSpec extends MachineShape {
  disk: string[];
  ram: string;
  state: string;
  /** The QEMU build, machine type and accelerator it was taken with: it restores only under the same. */
  qemu: string;
  machineType: string;
  accel: string;
  ports: number[];
  /** Those of `ports` exposed with `access: "key"` (absent: none). */
  keyPorts?: number[];
  /** Cluster mode: its files in the object store too, so any worker restores it. */
  stored?: StoredMachineFiles;
}

export interface SnapshotRow {
  id: string;
  tenantId: string;
  machineId: string;
  spec: SnapshotSpec;
  createdAt: string;
}


/** One connection of the egress audit log. */
export type EgressLogRow = { tenantId: string; context: string } & NetworkConnection;

/** An event as emitted (the store gives it its id). `data` is JSON of format 1 (its fields by kind: protocol's EventSchema). */
export interface NewEvent {
  tenantId: string;
  kind: EventKind;
  time: string;
  context?: string;
  machine?: string;
  data: Record<string, unknown>;
}

/** An event as stored: `id` increases with every append. */
export interface EventRow extends NewEvent { id: number }

/** Which of a tenant's events a reader wants. */
export interface EventFilter {
  kinds?: readonly EventKind[];
  context?: string;
  machine?: string;
  /** `sandbox.lifecycle` events of these types only (E2B's `types` filter). */
  lifecycleTypes?: readonly string[];
}

/**
 * A URL a tenant registered for its events. `format`: `shellbase` (the Event as JSON, signed with
 * Shellbase-Signature) or `e2b` (E2B's lifecycle payload and e2b-signature, registered through the
 * E2B-compatible API).
 */
export interface WebhookRow {
  id: string;
  tenantId: string;
  url: string;
  /**
   * What it takes, as match keys: an event's kind, except `sandbox.lifecycle.<type>` for a
   * sandbox's lifecycle event (so E2B's webhooks can take some of its types).
   */
  keys: string[];
  name: string;
  secret: string;
  enabled: boolean;
  format: 'shellbase' | 'e2b';
  createdAt: string;
}

/** One event on its way to one webhook. */
export interface DeliveryRow {
  id: number;
  webhookId: string;
  tenantId: string;
  eventId: number;
  /** The event's kind (when listed; absent once the event was trimmed). */
  kind?: EventKind;
  state: DeliveryState;
  attempts: number;
  nextAt: string;
  lastStatus?: number;
  lastError?: string;
  createdAt: string;
  updatedAt: string;
}

/** A delivery claimed to be tried now, with what it needs. */
export interface DueDelivery { delivery: DeliveryRow; webhook: WebhookRow; event: EventRow }

/** How a delivery attempt went. */
export interface DeliveryOutcome {
  state: DeliveryState;
  attempts: number;
  nextAt: string;
  lastStatus?: number;
  lastError?: string;
  updatedAt: string;
}

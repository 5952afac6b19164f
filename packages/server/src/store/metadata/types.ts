import type { VersionCause } from '@shellbase/protocol';
import type { Change } from '../snapshotter/types.js';

/**
 * The metadata store: tenants, keys, contexts, versions and layers. Written
 * against this interface so that SQLite (embedded) and Postgres (scale-out)
 * are dialects of one store. Every method is atomic on its own.
 *
 * - A **version** is immutable in content: `layers` (bottom first) may be
 *   rewritten to an equal representation (squash), nothing else changes.
 *   Its change set (`versionChanges`: the paths it changed over `parent`,
 *   null for an image) can be large, so it is read only where needed.
 * - A **context** is a tenant's named pointer to a head version. Heads move
 *   only by compare-and-set (`commitVersion`, `moveHead`).
 */
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
}

export interface ContextRow {
  tenantId: string;
  name: string;
  head: string;
  image: string;
  createdAt: string;
  updatedAt: string;
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
  kind: 'image' | 'exec' | 'squash';
  bytes: number;
  createdAt: string;
}

export interface CommitVersionOptions {
  version: NewVersion;
  /** A new layer the version introduces (recorded in the same transaction). */
  layer?: LayerRow;
  /** Move this context's head to the version if it still equals `expectedHead`. */
  moveHead?: { tenantId: string; context: string; expectedHead: string };
}

/** What a service runs (persisted as JSON with `format`). */
export interface ServiceSpec {
  format: 1;
  command: string | string[];
  port: number;
  env: Record<string, string>;
  idleTimeoutMs: number;
  startTimeoutMs: number;
  limits: { memoryMb?: number; pids?: number; cpus?: number; diskMb?: number };
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

/** What a machine is made of and made from; a snapshot keeps it for the machines it restores. */
export interface MachineShape {
  format: 1;
  image: string;
  context?: string;
  version?: string;
  memoryMb: number;
  cpus: number;
  idleTimeoutMs: number;
}

/** A machine as persisted (spec is JSON with `format`); its process lives in the server, not here. */
export interface MachineSpec extends MachineShape {
  /** The snapshot it was restored from (forks and restores). */
  snapshot?: string;
  /** Its disk's qcow2 chain, writable top first. */
  disk: string[];
  /** Exposed guest ports; each token names one in gateway URLs. */
  ports: { port: number; token: string }[];
}

export type MachineRowState = 'starting' | 'running' | 'paused' | 'hibernated' | 'stopped';

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
}

export interface SnapshotRow {
  id: string;
  tenantId: string;
  machineId: string;
  spec: SnapshotSpec;
  createdAt: string;
}

/** A version as garbage collection sees it. */
export interface GraphVersion {
  id: string;
  tenantId: string;
  parent: string | null;
  merged: string | null;
  context: string | null;
  createdAt: string;
}

export interface DropResult {
  /** Version rows deleted. */
  versions: number;
  /** Layer rows deleted: no version refers to them any more. Their directories are the caller's to remove. */
  layers: LayerRow[];
}

export interface MetadataStore {
  close(): Promise<void>;
  /** Makes every committed transaction durable (survives power loss, not only a crash). */
  sync(): Promise<void>;

  /** Inserts a tenant; false if the name is taken. */
  createTenant(row: TenantRow): Promise<boolean>;
  listTenants(): Promise<TenantRow[]>;
  getTenant(id: string): Promise<TenantRow | null>;
  addApiKey(tenantId: string, keyHash: string): Promise<void>;
  /** The tenant a key hash belongs to, if the key exists and is not revoked. */
  tenantForKey(keyHash: string): Promise<TenantRow | null>;
  adminTenant(): Promise<TenantRow | null>;
  tenantByName(name: string): Promise<TenantRow | null>;
  listApiKeys(tenantId: string): Promise<ApiKeyRow[]>;
  /** Revokes one key (by id) or, without an id, every key of the tenant; the number revoked. */
  revokeApiKeys(tenantId: string, keyId?: string): Promise<number>;

  getContext(tenantId: string, name: string): Promise<ContextRow | null>;
  listContexts(tenantId: string): Promise<ContextRow[]>;
  countContexts(tenantId: string): Promise<number>;
  /** Inserts a context; false if the name is taken. */
  createContext(row: ContextRow): Promise<boolean>;
  /** Deletes a context and its services; its versions stay (forks may share them) but no longer name it. */
  deleteContext(tenantId: string, name: string): Promise<boolean>;

  /** Inserts a service; false if the context already has one of that name. */
  createService(row: ServiceRow): Promise<boolean>;
  getService(tenantId: string, context: string, name: string): Promise<ServiceRow | null>;
  listServices(tenantId: string, context: string): Promise<ServiceRow[]>;
  serviceByToken(token: string): Promise<ServiceRow | null>;
  deleteService(tenantId: string, context: string, name: string): Promise<boolean>;

  createMachine(row: MachineRow): Promise<void>;
  getMachine(tenantId: string, id: string): Promise<MachineRow | null>;
  /** A tenant's machines, or every machine (crash recovery). */
  listMachines(tenantId?: string): Promise<MachineRow[]>;
  /** Writes state and spec (and the port tokens the spec names). */
  updateMachine(row: MachineRow): Promise<void>;
  deleteMachine(tenantId: string, id: string): Promise<boolean>;
  machineByPortToken(token: string): Promise<{ machine: MachineRow; port: number } | null>;
  createSnapshot(row: SnapshotRow): Promise<void>;
  getSnapshot(tenantId: string, id: string): Promise<SnapshotRow | null>;
  listSnapshots(tenantId?: string): Promise<SnapshotRow[]>;
  deleteSnapshot(tenantId: string, id: string): Promise<boolean>;

  /** Inserts the version (and layer) and moves the head, all or nothing; false if the head moved. */
  commitVersion(options: CommitVersionOptions): Promise<boolean>;
  getVersion(id: string): Promise<VersionRow | null>;
  /** The paths a version changed over its parent; null for an image (or an unknown version). */
  versionChanges(id: string): Promise<Change[] | null>;
  /** `id` and its ancestors, newest first. */
  lineage(id: string, limit: number): Promise<VersionRow[]>;
  /** Makes sure an image's root version and layer rows exist. */
  ensureImageVersion(version: NewVersion, layer: LayerRow): Promise<void>;

  /** Every layer id some version refers to or that is recorded (crash recovery keeps these). */
  layerIds(): Promise<Set<string>>;
  recordUsage(row: UsageRow): Promise<void>;
  /** Usage rows of a tenant in [from, to), summed per context or per kind. */
  usageTotals(tenantId: string, from: string, to: string, groupBy: UsageGrouping): Promise<UsageTotals[]>;
  /** Bytes of the distinct layers a tenant's versions hold (a shared layer counts once). */
  storedBytes(tenantId: string): Promise<number>;
  /** Bytes of the given layers (images count 0). */
  layerBytes(layerIds: readonly string[]): Promise<number>;

  /** Bytes of every stored layer (images count 0). */
  totalLayerBytes(): Promise<number>;
  /** Every version but the images' roots, and every context's head, read at one instant. */
  versionGraph(): Promise<{ versions: GraphVersion[]; heads: string[] }>;
  /**
   * In one transaction: deletes the versions `ids` except those that are a
   * context's head by then, cuts the parent and merged links that pointed at
   * them (history starts at the survivor), then deletes the rows of the
   * non-image layers no remaining version refers to, except `keepLayers`.
   */
  dropVersions(ids: readonly string[], keepLayers: ReadonlySet<string>): Promise<DropResult>;

  /** Rewrites every version whose layers start with `prefix` to start with `replacement`. */
  replaceLayerPrefix(prefix: string[], replacement: string[], layer: LayerRow): Promise<number>;
}

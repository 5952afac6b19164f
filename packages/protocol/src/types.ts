/** Wire types of HTTP API v1 shared by the server, the SDK and the CLI. */

export interface Context {
  name: string;
  head: string;
  /** The image it was made from: `debian`, or a pulled image's reference. */
  image: string;
  createdAt: string;
  updatedAt: string;
  /** Its own egress policy, if one is set (forks inherit it); else its tenant's applies. */
  network?: NetworkPolicy;
  /** What its queries and services run with unless a request says otherwise (forks inherit them). */
  defaults?: ContextDefaults;
  /** What its image (or Dockerfile) says the context runs, kept as it was given. */
  config?: ContextConfig;
}

/**
 * A context's defaults: environment (merged under a request's `env`), working
 * directory and user (`root`, or a user of the context's /etc/passwd, `name`,
 * `name:group`, `uid` or `uid:gid`, as a Dockerfile's USER).
 */
export interface ContextDefaults {
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
}

/** An image's (or a Dockerfile's) entrypoint, command, exposed ports and labels: recorded, not run. */
export interface ContextConfig {
  entrypoint?: string[];
  cmd?: string[];
  exposedPorts?: string[];
  labels?: Record<string, string>;
}

/** An OCI image's config as shellbase keeps it: its defaults and what it would run. */
export interface ImageConfig extends ContextConfig {
  env: Record<string, string>;
  cwd?: string;
  user?: string;
}

/** An OCI image a tenant pulled or imported; `POST /v1/contexts {image: ref}` makes contexts of it. */
export interface Image {
  /** Normalized reference, e.g. `docker.io/library/python:3.12-slim`. */
  ref: string;
  /** The digest of its manifest. */
  digest: string;
  /** Its root version (the image's layers, bottom first). */
  version: string;
  layers: number;
  /** Bytes of its layers' files, unpacked. */
  bytes: number;
  config: ImageConfig;
  createdAt: string;
}

/** One line of a pull's or an import's NDJSON stream; the last is `image` (or `images`), or `error`. */
export type ImageEvent =
  | { type: 'progress'; message: string; layer?: string; bytes?: number; total?: number }
  | { type: 'image'; image: Image }
  | { type: 'images'; images: Image[] }
  | { type: 'error'; error: import('./errors.js').ErrorBody };

/** One step of a build as it ran: its Dockerfile line, whether it came from the cache, the version it made. */
export interface BuildStep {
  /** The instruction as written (continuations joined), with its stage: `[build 2/5] RUN make`. */
  instruction: string;
  cached: boolean;
  /** The version after the step (config-only steps leave the previous one). */
  version: string;
  ms: number;
}

export interface BuildResult {
  context: string;
  version: string;
  steps: BuildStep[];
}

/** One line of a build's NDJSON stream: a step starting or done, a RUN's output, then `result` (or `error`). */
export type BuildEvent =
  | { type: 'step'; index: number; total: number; instruction: string; line: number }
  | ({ type: 'stepDone' } & BuildStep)
  | { type: 'stdout' | 'stderr'; data: string }
  | ({ type: 'result' } & BuildResult)
  | { type: 'error'; error: import('./errors.js').ErrorBody };

/** What made a version. */
export const VERSION_CAUSE_KINDS = ['exec', 'write', 'merge', 'reset', 'image', 'service', 'machine', 'build'] as const;
export type VersionCauseKind = (typeof VERSION_CAUSE_KINDS)[number];

export interface VersionCause {
  kind: VersionCauseKind;
  command?: string;
  /** The exit code of the query (`exec`) or service run (`service`) whose writes this version holds. */
  exitCode?: number;
}

export interface Version {
  id: string;
  parent: string | null;
  createdAt: string;
  cause: VersionCause;
  /** Bytes this version added over its parent. */
  bytes: number;
  /** A merge's second parent: the source context's version that was merged (absent for other versions). */
  merged?: string;
}

export interface ExecLimits {
  memoryMb?: number;
  pids?: number;
  cpus?: number;
  diskMb?: number;
  outputBytes?: number;
}

export type CommitMode = 'always' | 'on-success' | 'never';

/**
 * The most any tenant's `timeoutMs` may be (24 h): a query's, a machine exec's, a service's
 * `startTimeoutMs` and an E2B command's. Each tenant's own maximum (its `quotas.timeoutMs`, else
 * the server's `SHELLBASE_MAX_TIMEOUT_MS`, 1 h by default) is at most this.
 */
export const TIMEOUT_CEILING_MS = 86_400_000;

/** The limit that ended a command (now only its time limit): its value for this run, and the most the tenant may ask for. */
export interface LimitHit {
  name: 'timeoutMs';
  value: number;
  max: number;
}

export interface ExecRequest {
  command?: string;
  argv?: string[];
  stdin?: string;
  env?: Record<string, string>;
  cwd?: string;
  /** Who runs it (default: the context's default user, else root); see ContextDefaults. */
  user?: string;
  version?: string;
  commit?: CommitMode;
  onConflict?: 'fail' | 'retry';
  /** Milliseconds before the command is killed (default 60 s; at most the tenant's maximum, 1 h unless the admin set another, never above TIMEOUT_CEILING_MS). */
  timeoutMs?: number;
  limits?: ExecLimits;
  /** Narrows the context's egress policy for this query (docs/api.md, Network). */
  network?: NetworkPolicy;
}

export interface ExecUsage {
  cpuMs: number;
  wallMs: number;
  memoryPeakBytes: number;
  bytesWritten: number;
  /** Bytes the query sent and received through the egress proxy (present when it had egress). */
  egressBytes?: number;
  ingressBytes?: number;
}

/** The result of a query once it ended. */
export interface ExecResult {
  exitCode: number;
  signal?: string;
  timedOut: boolean;
  oomKilled: boolean;
  /** True when the disk limit (`limits.diskMb`) stopped a write. */
  diskLimitHit?: boolean;
  stdout: string;
  stderr: string;
  truncated: boolean;
  baseVersion: string;
  version: string;
  committed: boolean;
  /** Set when the query's changes overlapped changes committed meanwhile. */
  conflict?: { paths: string[]; version: string };
  /** How many times `onConflict: "retry"` ran the command again. */
  retries?: number;
  /** Set when a limit ended the command (with `timedOut`: its `timeoutMs`). */
  limit?: LimitHit;
  usage: ExecUsage;
}

export type ExecExit = Omit<ExecResult, 'stdout' | 'stderr'>;

/** One line of the NDJSON stream of a query. */
export type ExecEvent =
  | { type: 'stdout'; data: string }
  | { type: 'stderr'; data: string }
  | ({ type: 'exit' } & ExecExit)
  | { type: 'error'; error: import('./errors.js').ErrorBody };

export const FILE_TYPES = ['file', 'dir', 'symlink', 'other'] as const;
export type FileType = (typeof FILE_TYPES)[number];

export interface FileStat {
  type: FileType;
  size: number;
  mode: number;
  /** Owner and group as a sandbox sees them (65534 for ids a sandbox cannot map). */
  uid: number;
  gid: number;
  mtime: string;
  /** A symlink's target, as stored. */
  target?: string;
}

export interface DirEntry extends FileStat {
  name: string;
}

export const DIFF_KINDS = ['added', 'modified', 'deleted'] as const;

export interface DiffChange {
  path: string;
  kind: (typeof DIFF_KINDS)[number];
  type: FileType;
  size?: number;
}

export interface DiffResult {
  changes: DiffChange[];
  /** With `path`: a unified diff of that file. */
  patch?: string;
}

export interface Tenant {
  id: string;
  name: string;
  admin: boolean;
  createdAt: string;
  /** The tenant's own quotas (absent ones are the server's defaults). */
  quotas?: Record<string, number>;
  /** The tenant's egress policy (absent: the server's default, SHELLBASE_EGRESS). */
  network?: NetworkPolicy;
}

export interface ApiKey {
  /** Names the key without revealing it. */
  id: string;
  createdAt: string;
  revokedAt: string | null;
}

export interface UsageItem {
  key: string;
  queries: number;
  cpuMs: number;
  wallMs: number;
  /** Wall time of service runs, idle tails included (capacity), and of machines' running stretches. */
  serviceSeconds: number;
  machineSeconds: number;
  /** The billed part: service runs' time with a request, connection or start in progress; machines' with a call, connection or guest CPU in use. */
  serviceActiveSeconds: number;
  machineActiveSeconds: number;
  /** Machines' running time weighted by their memory (MiB × seconds). */
  machineMbSeconds: number;
  /** Bytes sent and received through the egress proxy by queries, services and machines. */
  egressBytes: number;
  ingressBytes: number;
  /** Layers (per context: its head's; in the total: every distinct layer) and, in the total, machines' disks, snapshots and hibernated memory. */
  bytesStored: number;
}

/** What one garbage collection run did (`POST /v1/gc`, admin only). */
export interface GcResult {
  versionsDropped: number;
  /** Layer directories deleted (including ones deferred from earlier runs). */
  layersDeleted: number;
  /** Bytes of the layers no version refers to any more. */
  bytesFreed: number;
  /** Layers unreferenced but still used by running work: deleted by a later run. */
  deferredLayers: number;
  /** Machine templates of tenants' versions that nothing stood on and nobody used for a while. */
  templatesDeleted: number;
  /** Usage ledger rows older than a day folded into hourly rows. */
  usageRowsRolledUp: number;
  /** False when the pass stopped at its time budget (SHELLBASE_GC_BUDGET_MS): the next pass goes on from there. */
  complete: boolean;
  ms: number;
}

/** A service's states (engine/services/lifecycle.ts has its transitions). */
export const SERVICE_STATES = ['sleeping', 'starting', 'running', 'stopping'] as const;
export type ServiceState = (typeof SERVICE_STATES)[number];

/** A long-running process over a context, on a URL; it runs only while it is used. */
export interface Service {
  name: string;
  context: string;
  /** As given: a string runs with bash -c, an array as argv. */
  command: string | string[];
  port: number;
  /** The gateway URL (its host label is an unguessable token). */
  url: string;
  /** The same service through a path prefix, for clients that cannot resolve *.localhost. */
  pathUrl: string;
  state: ServiceState;
  idleTimeoutMs: number;
  /** `url`: the URL's token is enough; `key`: the gateway also wants the tenant's API key. */
  access: ServiceAccess;
  /** The service's own narrowing of its context's egress policy, if any. */
  network?: NetworkPolicy;
  /** Who else reaches it at `{name}.{context}.internal:{port}`; absent: its own context only. */
  share?: ServiceShare;
  createdAt: string;
}

/** `"tenant"`: every context of the tenant; a list: those contexts. */
export type ServiceShare = 'tenant' | string[];

export const SERVICE_ACCESS = ['url', 'key'] as const;
export type ServiceAccess = (typeof SERVICE_ACCESS)[number];

export interface CreateServiceRequest {
  name: string;
  command: string | string[];
  port: number;
  env?: Record<string, string>;
  idleTimeoutMs?: number;
  /** Milliseconds the port has to open after a start (default 30 s; at most the tenant's maximum `timeoutMs`). */
  startTimeoutMs?: number;
  limits?: Omit<ExecLimits, 'timeoutMs' | 'outputBytes'>;
  access?: ServiceAccess;
  network?: NetworkPolicy;
  share?: ServiceShare;
}

/**
 * A machine's states (machines/lifecycle.ts has its transitions). `lost`: in a cluster, the worker
 * running it died with its memory (its snapshots still restore).
 */
export const MACHINE_STATES = ['starting', 'running', 'paused', 'hibernated', 'stopped', 'lost'] as const;
export type MachineState = (typeof MACHINE_STATES)[number];

/** A microVM: its own kernel, systemd, processes and memory; restored from a snapshot, never booted in a caller's path. */
export interface Machine {
  id: string;
  state: MachineState;
  /** The context (and version) its disk was made from; absent for a machine of a bare image. */
  context?: string;
  version?: string;
  image: string;
  memoryMb: number;
  cpus: number;
  /** Its disk's size as the guest sees it (GiB); its root file system fills it. Grows with `POST /v1/machines/{id}/disk`. */
  diskGb: number;
  /** Its own narrowing of its context's (or tenant's) egress policy, if it was made with one; forks keep it. */
  network?: NetworkPolicy;
  /** Hibernates after this long without exec, file calls or requests to its ports. */
  idleTimeoutMs: number;
  /** The snapshot it was restored from, when it was (forks and restores). */
  snapshot?: string;
  ports: MachinePort[];
  createdAt: string;
}

export interface MachinePort {
  port: number;
  /** The gateway URL (its host label is an unguessable token). */
  url: string;
  pathUrl: string;
  /** `key`: the gateway also wants the tenant's API key (as a service's `access`). */
  access: ServiceAccess;
}

export interface CreateMachineRequest {
  context?: string;
  version?: string;
  image?: string;
  memoryMb?: number;
  cpus?: number;
  /** The disk's size in GiB: at least 8 (the default), at most the server's maximum. */
  diskGb?: number;
  idleTimeoutMs?: number;
  /** Narrows the context's (or, without a context, the tenant's) egress policy for this machine. */
  network?: NetworkPolicy;
}

/** Grows a running (or hibernated) machine's disk and its root file system, online. Disks never shrink. */
export interface ResizeMachineDiskRequest {
  diskGb: number;
}

/** A query's request without what only contexts have (versions and commits). */
export type MachineExecRequest = Omit<ExecRequest, 'version' | 'commit' | 'onConflict' | 'limits' | 'user'> & {
  limits?: Pick<ExecLimits, 'outputBytes'>;
};

export interface MachineExecResult {
  exitCode: number;
  signal?: string;
  timedOut: boolean;
  /** Set when a limit ended the command (with `timedOut`: its `timeoutMs`). */
  limit?: LimitHit;
  stdout: string;
  stderr: string;
  truncated: boolean;
  usage: { wallMs: number };
}

export type MachineExecEvent =
  | { type: 'stdout'; data: string }
  | { type: 'stderr'; data: string }
  | ({ type: 'exit' } & Omit<MachineExecResult, 'stdout' | 'stderr'>)
  | { type: 'error'; error: import('./errors.js').ErrorBody };

/** The end of a machine's serial console log (`GET /v1/machines/{id}/console?tail=N`). */
export interface MachineConsole {
  /** Its last lines, oldest first, without line ends (at most the `tail` asked for, from at most its last 1 MiB). */
  lines: string[];
  /** Earlier lines were left out. */
  truncated: boolean;
  /** Bytes the log holds in all (it grows across the machine's restores and wakes on this worker). */
  size: number;
}

/** The largest `tail` of `GET /v1/machines/{id}/console`, and how far back it reads. */
export const MACHINE_CONSOLE_MAX_LINES = 10_000;
export const MACHINE_CONSOLE_MAX_BYTES = 1 << 20;

/**
 * The WebSocket subprotocols of `GET /v1/machines/{id}/pty`: the client offers `PTY_PROTOCOL`,
 * and (browsers cannot set `Authorization` on a WebSocket) its API key as
 * `PTY_KEY_PREFIX + base64url(key)`; the server answers with `PTY_PROTOCOL` only.
 */
export const PTY_PROTOCOL = 'shellbase-pty';
export const PTY_KEY_PREFIX = 'shellbase-key.';

/**
 * A PTY's control messages (WebSocket text frames, JSON); its bytes both ways are binary frames.
 * Client to server: `resize`. Server to client: `exit` when the shell ended (then the socket closes).
 */
export type PtyMessage = { type: 'resize'; cols: number; rows: number } | { type: 'exit'; exitCode: number | null; signal?: string };

/** RAM, device state and disk of a machine frozen at one instant. */
export interface MachineSnapshot {
  id: string;
  machine: string;
  memoryMb: number;
  cpus: number;
  diskGb: number;
  createdAt: string;
}

/** Where a sandbox's connections may go (docs/api.md, Network). */
export type NetworkPolicy = { egress: 'none' } | { egress: 'allow'; domains: string[] } | { egress: 'public' };

/** A context's network settings: its own policy (absent: the tenant's), and what its sandboxes get. */
export interface ContextNetwork {
  policy: NetworkPolicy | null;
  effective: NetworkPolicy;
}

/** One connection a sandbox asked the egress proxy for. */
export interface NetworkConnection {
  time: string;
  host: string;
  port: number;
  bytesOut: number;
  bytesIn: number;
  allowed: boolean;
  /** Why it was refused (or why it failed). */
  reason?: string;
  /** What made it: a query, a service run, a machine. */
  kind: 'query' | 'service' | 'machine';
}

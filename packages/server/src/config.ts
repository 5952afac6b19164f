import { availableParallelism, totalmem } from 'node:os';
import path from 'node:path';
import { TIMEOUT_CEILING_MS, type NetworkPolicy } from '@shellbase/protocol';
import { invalid } from './errors.js';
import { checkPolicy } from './net/policy.js';
import type { EgressConfig } from './net/settings.js';

export type { EgressConfig } from './net/settings.js';

/** A query's resource limits, all present. */
export interface Limits {
  memoryMb: number;
  pids: number;
  cpus: number;
  diskMb: number;
  outputBytes: number;
  timeoutMs: number;
}

export interface ServerConfig {
  /** Data directory: metadata, layer store, scratch space, admin key. */
  home: string;
  /** Built images (and later VM assets), shared by every data directory on the host. */
  cache: string;
  host: string;
  port: number;
  gatewayPort: number;
  /** What a query gets when it asks for nothing. */
  defaults: Limits;
  /** The most a query may ask for (a tenant's quotas lower these; its `timeoutMs` may also raise its own, up to TIMEOUT_CEILING_MS). */
  maximums: Limits;
  /** Size of the sparse btrfs file that holds the layer store when home is not on btrfs. */
  storeSizeGb: number;
  /** Layer chains longer than this are squashed in the background. */
  squashAbove: number;
  /** How long a client may take to send its headers, and its whole request (body included). */
  http: { headersTimeoutMs: number; requestTimeoutMs: number };
  /** Sync layers and metadata before acknowledging writes (power-loss durability); off only for throw-away data. */
  durable: boolean;
  /** Queries start in sandboxes made ahead of them (runtime/bwrap/warm-pool.ts); `SHELLBASE_WARM=0` turns it off. */
  warm: boolean;
  /** Garbage collection: how often, and how much history a tenant that sets none keeps. */
  gc: { intervalMs: number; retentionDays: number; keepVersions: number; budgetMs: number };
  /** Tenants' events: days they are kept (SHELLBASE_EVENTS_DAYS; garbage collection trims them). */
  events: { keepDays: number };
  /** Quotas of a tenant that sets none of its own. */
  quotas: { contexts: number; storedBytes: number; concurrentQueries: number; runningServices: number; runningMachines: number; tenantCpus: number };
  machines: MachinesConfig;
  egress: EgressConfig;
  /** The embedded metadata store when it is not `meta.db` in the home (SHELLBASE_METADATA=sqlite:PATH). */
  metadataUrl?: string;
  /** Cluster mode (docs/deploy.md): null for the embedded default (SQLite and this host's disk). */
  cluster: ClusterConfig | null;
  /**
   * The host's TLS authorities shown to sandboxes, services, machines and builds (trust/): the
   * `*.crt` below `hostDir` (SHELLBASE_HOST_CA_DIR, default /usr/local/share/ca-certificates, where
   * Debian keeps a host's local authorities) and the PEM bundle `extraFile`
   * (SHELLBASE_EXTRA_CA_FILE); SHELLBASE_EXTRA_CA=off turns it off.
   */
  trust: { enabled: boolean; hostDir: string; extraFile?: string };
  /** Serve the API and the gateway over HTTPS (SHELLBASE_TLS_CERT and SHELLBASE_TLS_KEY: PEM files); absent: plain HTTP. */
  tls?: { cert: string; key: string };
}

/** A worker of a cluster: the shared metadata and object store, and how it is reached. */
export interface ClusterConfig {
  /** The metadata store's URL (SHELLBASE_METADATA, --metadata): postgres://… */
  metadata: string;
  /** The blob store's URL (SHELLBASE_BLOBS, --blobs): s3://BUCKET/PREFIX */
  blobs: string;
  /** The S3 API's URL when it is not AWS's (SHELLBASE_S3_ENDPOINT, --s3-endpoint). */
  s3Endpoint?: string;
  /** The URL other workers reach this one at (SHELLBASE_ADVERTISE, --advertise); default: the address it listens on. */
  advertise?: string;
  /** Bytes of layers this worker keeps fetched or committed (SHELLBASE_CACHE_MAX_GB, default 20 GiB). */
  cacheMaxBytes: number;
  /** How often a worker says it is alive (and publishes its pins); three missed beats and it is gone. */
  heartbeatMs: number;
  /** How long a dropped layer's blob stays in the object store (SHELLBASE_BLOB_GRACE_MS, default 10 minutes). */
  blobGraceMs: number;
  /**
   * Locality (SHELLBASE_LOCALITY=on): a query is passed to its context's preferred worker unless
   * that one's load (operations running, as of its last heartbeat) is at least this
   * (SHELLBASE_LOCALITY_MAX_LOAD, default 16); null: off, queries run where they land.
   */
  localityMaxLoad: number | null;
  /**
   * A file holding the cluster secret (SHELLBASE_CLUSTER_SECRET_FILE; at least 32 bytes, the same
   * on every worker); absent: the secret the first worker stored in Postgres (`cluster_secrets`).
   */
  secretFile?: string;
  /** The CA (PEM) other workers' certificates chain to, when it is not one the system trusts (SHELLBASE_TLS_CA). */
  tlsCa?: string;
  /**
   * Mutual TLS between workers (SHELLBASE_TLS_CLIENT_AUTH, --tls-client-auth): this worker's own
   * certificate and key (SHELLBASE_TLS_CERT, SHELLBASE_TLS_KEY), shown when it connects to another
   * worker; what other workers pass here must come with a certificate issued by `tlsCa`.
   */
  clientAuth?: { cert: string; key: string };
}

/** The TLS files the environment gives (SHELLBASE_TLS_CERT and SHELLBASE_TLS_KEY, both or neither). */
export function tlsFromEnv(e: Record<string, string | undefined> = env): ServerConfig['tls'] {
  const cert = e.SHELLBASE_TLS_CERT || undefined;
  const key = e.SHELLBASE_TLS_KEY || undefined;
  if (!cert && !key) return undefined;
  if (!cert || !key) throw invalid('TLS needs both a certificate and its key', 'give --tls-cert FILE and --tls-key FILE (SHELLBASE_TLS_CERT, SHELLBASE_TLS_KEY), or neither');
  return { cert, key };
}

/** Mutual TLS between workers, when SHELLBASE_TLS_CLIENT_AUTH asks for it: it needs the worker's certificate, key and the cluster's CA. */
function clientAuth(e: Record<string, string | undefined>): { clientAuth?: { cert: string; key: string } } {
  const on = e.SHELLBASE_TLS_CLIENT_AUTH ?? '';
  if (on === '' || /^(0|false|no)$/i.test(on)) return {};
  if (!/^(1|true|yes)$/i.test(on)) throw invalid(`SHELLBASE_TLS_CLIENT_AUTH is ${JSON.stringify(on)}`, 'set it to 1 (or give --tls-client-auth) for mutual TLS between workers, or leave it out');
  if (!e.SHELLBASE_TLS_CERT || !e.SHELLBASE_TLS_KEY || !e.SHELLBASE_TLS_CA) {
    throw invalid('mutual TLS between workers needs this worker\'s certificate and key and the cluster\'s CA', 'give --tls-cert FILE --tls-key FILE --tls-ca FILE with --tls-client-auth (docs/deploy.md, Security between workers)');
  }
  return { clientAuth: { cert: e.SHELLBASE_TLS_CERT, key: e.SHELLBASE_TLS_KEY } };
}

/**
 * The cluster settings the environment gives (SHELLBASE_METADATA with a postgres:// URL and
 * SHELLBASE_BLOBS), or null for the embedded default. Half a cluster is refused.
 */
export function clusterFromEnv(e: Record<string, string | undefined> = env): ClusterConfig | null {
  const metadata = e.SHELLBASE_METADATA || undefined;
  const blobs = e.SHELLBASE_BLOBS || undefined;
  const postgres = metadata !== undefined && /^postgres(ql)?:\/\//.test(metadata);
  if (!postgres && blobs === undefined) return null;
  if (!postgres || blobs === undefined) {
    throw invalid(postgres ? 'a cluster needs an object store too: --blobs s3://BUCKET/PREFIX (SHELLBASE_BLOBS)'
      : 'an object store is for a cluster, which needs Postgres too: --metadata postgres://… (SHELLBASE_METADATA)',
    'give both --metadata postgres://… and --blobs s3://BUCKET/PREFIX, or neither for the embedded default');
  }
  return {
    metadata, blobs,
    ...(e.SHELLBASE_S3_ENDPOINT ? { s3Endpoint: e.SHELLBASE_S3_ENDPOINT } : {}),
    ...(e.SHELLBASE_ADVERTISE ? { advertise: e.SHELLBASE_ADVERTISE } : {}),
    ...(e.SHELLBASE_CLUSTER_SECRET_FILE ? { secretFile: e.SHELLBASE_CLUSTER_SECRET_FILE } : {}),
    ...(e.SHELLBASE_TLS_CA ? { tlsCa: e.SHELLBASE_TLS_CA } : {}),
    ...clientAuth(e),
    cacheMaxBytes: Math.round(num('SHELLBASE_CACHE_MAX_GB', 20, e) * 2 ** 30),
    heartbeatMs: num('SHELLBASE_HEARTBEAT_MS', 2000, e),
    blobGraceMs: num('SHELLBASE_BLOB_GRACE_MS', 600_000, e),
    localityMaxLoad: locality(e),
  };
}

function locality(e: Record<string, string | undefined>): number | null {
  const on = (e.SHELLBASE_LOCALITY ?? 'off').toLowerCase();
  if (on !== 'on' && on !== 'off') throw invalid(`SHELLBASE_LOCALITY must be on or off, not ${JSON.stringify(on)}`, 'set SHELLBASE_LOCALITY=on (or leave it unset: off)');
  return on === 'on' ? num('SHELLBASE_LOCALITY_MAX_LOAD', 16, e) : null;
}


function egressDefault(v: string | undefined): NetworkPolicy {
  if (v === undefined || v === '' || v === 'public') return { egress: 'public' };
  if (v === 'none') return { egress: 'none' };
  if (v.startsWith('allow:')) return checkPolicy({ egress: 'allow', domains: v.slice(6).split(',') });
  throw new Error(`SHELLBASE_EGRESS must be none, public or allow:DOMAIN,…, not ${JSON.stringify(v)}`);
}

function hostMap(v: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of (v ?? '').split(',').map((s) => s.trim()).filter(Boolean)) {
    const [name, address] = pair.split('=');
    if (!name || !address) throw new Error(`SHELLBASE_EGRESS_HOSTS takes name=address pairs, not ${JSON.stringify(pair)}`);
    out[name.toLowerCase()] = address;
  }
  return out;
}

export interface MachinesConfig {
  /** `auto`: KVM where /dev/kvm exists and boots a kernel, TCG otherwise. */
  accel: 'auto' | 'kvm' | 'tcg';
  /** Machines running (or paused) on this host at once, whatever their tenants. */
  maxRunning: number;
  /** Guest RAM all running machines may have together (MiB). */
  memoryBudgetMb: number;
  /** The most copies one fork or restore call makes. */
  maxFork: number;
  defaultMemoryMb: number;
  maxMemoryMb: number;
  maxCpus: number;
  /** The largest disk a machine may ask for or grow to (GiB; sparse: only what the guest writes takes space). */
  maxDiskGb: number;
  /** Hibernate after this long without use, unless the machine says otherwise. */
  defaultIdleTimeoutMs: number;
  /** A template of a tenant's version that no machine or snapshot stands on goes after this long unused. */
  templateIdleMs: number;
  /**
   * How a fork or snapshot of a running machine copies its memory (SHELLBASE_MACHINES_LIVE_COPY):
   * `on`, while it runs (machines/vm/live-copy.ts: a pause of tens of ms, a copy of all of its memory);
   * `off`, stopped for the copy of the memory it uses; `auto` (the default), live unless a stopped
   * copy is expected to pause it no longer than `pauseMs`. Never where the copy would miss pages
   * the guest writes (machines/vm/live-copy.ts `liveCopySound`).
   */
  liveCopy: 'auto' | 'on' | 'off';
  /** `auto`'s bound on a stopped copy's pause (SHELLBASE_MACHINES_PAUSE_MS, default 100). */
  pauseMs: number;
  /**
   * Machines restored ahead per hot template (SHELLBASE_MACHINES_READY, default 1; 0: none): a
   * create from that template takes one instead of restoring (machines/pool/ready.ts).
   */
  readyPerTemplate: number;
  /** A template is hot this long after a create used it (SHELLBASE_MACHINES_READY_IDLE_MS, default 10 min). */
  readyIdleMs: number;
}

const env = process.env;
const num = (name: string, fallback: number, from: Record<string, string | undefined> = env): number => {
  const v = from[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, not ${JSON.stringify(v)}`);
  return n;
};

/** A whole number, 0 or more. */
const count = (name: string, fallback: number): number => {
  const v = env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a whole number (0 or more), not ${JSON.stringify(v)}`);
  return n;
};

function trustFromEnv(): ServerConfig['trust'] {
  const v = env.SHELLBASE_EXTRA_CA;
  if (v !== undefined && v !== '' && v !== 'on' && v !== 'off') throw new Error(`SHELLBASE_EXTRA_CA must be on or off, not ${JSON.stringify(v)}`);
  const file = env.SHELLBASE_EXTRA_CA_FILE;
  return {
    enabled: v !== 'off',
    hostDir: path.resolve(env.SHELLBASE_HOST_CA_DIR || '/usr/local/share/ca-certificates'),
    ...(file ? { extraFile: path.resolve(file) } : {}),
  };
}

function liveCopySetting(v: string | undefined): MachinesConfig['liveCopy'] {
  if (v === undefined || v === '' || v === 'auto') return 'auto';
  if (v === 'on' || v === 'off') return v;
  throw new Error(`SHELLBASE_MACHINES_LIVE_COPY must be auto, on or off, not ${JSON.stringify(v)}`);
}

function accelSetting(v: string | undefined): MachinesConfig['accel'] {
  if (v === undefined || v === '' || v === 'auto') return 'auto';
  if (v === 'kvm' || v === 'tcg') return v;
  throw new Error(`SHELLBASE_MACHINE_ACCEL must be auto, kvm or tcg, not ${JSON.stringify(v)}`);
}

/**
 * A tenant's maximum `timeoutMs` unless its quotas say otherwise (SHELLBASE_MAX_TIMEOUT_MS, default
 * 1 h); an admin may set a tenant's up to TIMEOUT_CEILING_MS (24 h), which this may not pass either.
 */
function maxTimeoutMs(): number {
  const ms = num('SHELLBASE_MAX_TIMEOUT_MS', 3_600_000);
  if (ms > TIMEOUT_CEILING_MS) throw new Error(`SHELLBASE_MAX_TIMEOUT_MS must be at most ${TIMEOUT_CEILING_MS} (24 h), not ${ms}`);
  return ms;
}

export function loadConfig(overrides: Partial<ServerConfig> = {}): ServerConfig {
  const defaults: Limits = {
    memoryMb: 1024, pids: 512, cpus: 1, diskMb: 2048, outputBytes: 1 << 20, timeoutMs: 60_000,
  };
  const maximums: Limits = {
    memoryMb: num('SHELLBASE_MAX_MEMORY_MB', 8192),
    pids: num('SHELLBASE_MAX_PIDS', 4096),
    cpus: num('SHELLBASE_MAX_CPUS', availableParallelism()),
    diskMb: num('SHELLBASE_MAX_DISK_MB', 65536),
    outputBytes: num('SHELLBASE_MAX_OUTPUT_BYTES', 64 << 20),
    timeoutMs: maxTimeoutMs(),
  };
  const config: ServerConfig = {
    home: path.resolve(env.SHELLBASE_HOME || '/var/lib/shellbase'),
    cache: path.resolve(env.SHELLBASE_CACHE || '/var/cache/shellbase'),
    host: env.SHELLBASE_HOST || '127.0.0.1',
    port: num('SHELLBASE_PORT', 7070),
    gatewayPort: num('SHELLBASE_GATEWAY_PORT', 7071),
    defaults,
    maximums,
    storeSizeGb: num('SHELLBASE_STORE_SIZE_GB', 64),
    squashAbove: num('SHELLBASE_SQUASH_ABOVE', 24),
    durable: env.SHELLBASE_DURABLE !== '0',
    warm: env.SHELLBASE_WARM !== '0',
    http: {
      headersTimeoutMs: num('SHELLBASE_HEADERS_TIMEOUT_MS', 10_000),
      requestTimeoutMs: num('SHELLBASE_REQUEST_TIMEOUT_MS', 120_000),
    },
    gc: {
      intervalMs: num('SHELLBASE_GC_INTERVAL_MS', 600_000),
      retentionDays: num('SHELLBASE_RETENTION_DAYS', 30),
      keepVersions: num('SHELLBASE_KEEP_VERSIONS', 10),
      budgetMs: num('SHELLBASE_GC_BUDGET_MS', 10_000),
    },
    events: { keepDays: num('SHELLBASE_EVENTS_DAYS', 7) },
    quotas: {
      contexts: num('SHELLBASE_QUOTA_CONTEXTS', 1_000_000),
      storedBytes: num('SHELLBASE_QUOTA_STORED_BYTES', Number.POSITIVE_INFINITY),
      concurrentQueries: num('SHELLBASE_QUOTA_CONCURRENT_QUERIES', 64),
      runningServices: num('SHELLBASE_QUOTA_RUNNING_SERVICES', 16),
      runningMachines: num('SHELLBASE_QUOTA_RUNNING_MACHINES', 4),
      // Half the host (at least one core) for all of one tenant's sandboxes together.
      tenantCpus: num('SHELLBASE_QUOTA_TENANT_CPUS', Math.max(1, Math.floor(availableParallelism() / 2))),
    },
    machines: {
      accel: accelSetting(env.SHELLBASE_MACHINE_ACCEL),
      maxRunning: num('SHELLBASE_MACHINES_MAX_RUNNING', 8),
      memoryBudgetMb: num('SHELLBASE_MACHINES_MEMORY_MB', Math.floor(totalmem() / 2 / 2 ** 20)),
      maxFork: num('SHELLBASE_MACHINES_MAX_FORK', 8),
      defaultMemoryMb: 512,
      maxMemoryMb: num('SHELLBASE_MACHINES_MAX_MEMORY_MB', 8192),
      maxCpus: num('SHELLBASE_MACHINES_MAX_CPUS', availableParallelism()),
      maxDiskGb: num('SHELLBASE_MACHINES_MAX_DISK_GB', 64),
      defaultIdleTimeoutMs: num('SHELLBASE_MACHINES_IDLE_MS', 600_000),
      templateIdleMs: num('SHELLBASE_MACHINES_TEMPLATE_IDLE_MS', 86_400_000),
      liveCopy: liveCopySetting(env.SHELLBASE_MACHINES_LIVE_COPY),
      pauseMs: num('SHELLBASE_MACHINES_PAUSE_MS', 100),
      readyPerTemplate: count('SHELLBASE_MACHINES_READY', 1),
      readyIdleMs: num('SHELLBASE_MACHINES_READY_IDLE_MS', 600_000),
    },
    egress: {
      default: egressDefault(env.SHELLBASE_EGRESS),
      allowCidrs: (env.SHELLBASE_EGRESS_ALLOW_CIDRS ?? '').split(',').map((s) => s.trim()).filter(Boolean),
      hosts: hostMap(env.SHELLBASE_EGRESS_HOSTS),
      maxPerSandbox: num('SHELLBASE_EGRESS_MAX_CONNECTIONS', 256),
      maxPerTenant: num('SHELLBASE_EGRESS_MAX_TENANT_CONNECTIONS', 1024),
      logDays: num('SHELLBASE_EGRESS_LOG_DAYS', 7),
    },
    trust: trustFromEnv(),
    ...(env.SHELLBASE_METADATA?.startsWith('sqlite:') ? { metadataUrl: env.SHELLBASE_METADATA } : {}),
    cluster: overrides.cluster === undefined ? clusterFromEnv() : null,
    ...(tlsFromEnv() ? { tls: tlsFromEnv() } : {}),
    ...overrides,
  };
  for (const k of Object.keys(defaults) as (keyof Limits)[]) {
    config.defaults[k] = Math.min(config.defaults[k], config.maximums[k]);
  }
  return config;
}

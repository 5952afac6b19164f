import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import pino, { type Logger } from 'pino';
import { startGateway } from './api/gateway.js';
import { ShellbaseError } from './errors.js';
import { buildApi } from './api/server.js';
import type { ServerConfig } from './config.js';
import { Engine } from './engine/engine.js';
import { Events } from './events/index.js';
import { Machines } from './machines/machines.js';
import { restoreMachineFiles, stowForCluster } from './machines/backup.js';
import { migrateHome, type MigrateProgress, type MigrateResult } from './engine/transfer/migrate.js';
import { MachineLayout } from './machines/layout.js';
import { E2bCompat } from './compat/e2b/index.js';
import { e2bWebhookFormat } from './compat/e2b/events.js';
import { Operations } from './ops/dispatch.js';
import { ClusterRouter, HereRouter } from './ops/routing.js';
import { Pins } from './core/pins.js';
import { imageRootfs, writeRootfs } from './images/index.js';
import { PrometheusMeter } from './meter/prometheus.js';
import { Dialer } from './util/dialer.js';
import { BwrapRuntime, cgroupDriver, cgroupInstance } from './runtime/index.js';
import { BtrfsSnapshotter } from './store/snapshotter/index.js';
import { openMetadataStore, SCHEMA_VERSION, SqliteSnapshot } from './store/metadata/index.js';
import { openBlobStore } from './store/blobs/index.js';
import { restoreHome, type RestoreOptions, type RestoreProgress, type RestoreResult } from './engine/transfer/restore.js';
import { openCluster, type ClusterStores } from './cluster/open.js';
import { startNetwork } from './net/index.js';
import { GroupSync } from './util/group-sync.js';
import { SANDBOX_ROOT } from './util/idmap.js';
import { assertNativeBuilt } from './util/native.js';
import { HostAuthorities, TrustLayers } from './trust/index.js';

export interface RunningServer {
  url: string;
  /** Where services answer (`{token}.localhost:PORT` or `/s/{token}/`). */
  gatewayUrl: string;
  adminKeyFile: string;
  engine: Engine;
  machines: Machines;
  /** Writes a version's whole tree into `out`, a new directory (a Dockerfile image's build into the image cache: images/rootfs.ts). */
  writeRootfs(version: string, out: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * One shellbase server over one data directory:
 * `$HOME/meta.db` (SQLite), `$HOME/store` (btrfs: `layers/`, `scratch/`),
 * `$HOME/admin.key`, `$HOME/server.pid`. In cluster mode (config.cluster) the metadata is in
 * Postgres and layers in the object store; the data directory holds this worker's cache of
 * layers, its scratch space and machines.
 */
export async function startServer(config: ServerConfig, log: Logger = pino({ level: process.env.SHELLBASE_LOG_LEVEL ?? 'info' })): Promise<RunningServer> {
  assertNativeBuilt();
  // Others may pass through (a sandbox's user namespace reaches its root through it), not list.
  mkdirSync(config.home, { recursive: true, mode: 0o711 });
  chmodSync(config.home, 0o711);
  const pidFile = path.join(config.home, 'server.pid');
  claimHome(pidFile);
  const dialer = new Dialer(path.join(config.home, 'streams'));
  const local = localSnapshotter(config, dialer);
  // Cluster mode: Postgres and the object store, this host's snapshotter as their cache.
  const pins = new Pins();
  let address = { api: '', gateway: '' };
  let cluster: ClusterStores | null = null;
  try {
    cluster = config.cluster ? await openCluster(config.cluster, local, pins, () => address, () => pins.active, log) : null;
  } catch (e) {
    rmSync(pidFile, { force: true });
    throw e;
  }
  const metadata = cluster?.metadata ?? (await openMetadataStore(config.metadataUrl, config.home));
  // The home is passable by others; the database (key hashes) is not readable by them.
  for (const f of ['meta.db', 'meta.db-wal', 'meta.db-shm']) {
    if (existsSync(path.join(config.home, f))) chmodSync(path.join(config.home, f), 0o600);
  }
  const layers = cluster?.snapshotter ?? local;
  await layers.open();
  const runtime = new BwrapRuntime(cgroupDriver(cgroupInstance(config.home)), {
    dialer,
    helpers: path.join(config.home, 'bin'),
    warm: config.warm ? { dir: path.join(config.home, 'warm'), onError: (message) => log.warn(message) } : undefined,
  });
  const meter = new PrometheusMeter({ storedBytes: () => metadata.tenants.totalStoredBytes() });
  if (cluster) {
    const db = cluster.metadata.db;
    meter.watchRoundTrips(() => db.roundTrips);
  }
  const durability = config.durable ? {
    layers: runner(new GroupSync(() => layers.sync())),
    metadata: runner(new GroupSync(() => metadata.sync())),
  } : { layers: async () => undefined, metadata: async () => undefined };
  // The host's authorities for sandboxes: made again as needed (nothing of a sandbox survives a restart).
  rmSync(path.join(config.home, 'trust'), { recursive: true, force: true });
  const trust = new TrustLayers({
    authorities: config.trust.enabled ? new HostAuthorities({ hostDir: config.trust.hostDir, extraFile: config.trust.extraFile, log }) : null,
    snapshotter: layers, dir: path.join(config.home, 'trust'),
  });
  const network = startNetwork(config, metadata.egressLog, meter, log);
  // Tenants' events: written to the metadata store, streamed, sent to webhooks through the egress proxy.
  const events = new Events({ metadata, egress: network.egress, defaultPolicy: config.egress.default, readOthers: cluster !== null, log });
  events.addFormat('e2b', e2bWebhookFormat);
  const deps = {
    config, metadata, snapshotter: layers, runtime, host: runtime, dialer, log, meter, pins, durability, trust, ...network, events: events.log,
    ...(cluster ? { cluster: cluster.worker, peers: cluster.peers } : {}),
  };
  // Machines are a peer of the engine: they reach contexts through what the engine offers them.
  let machines: Machines | null = null;
  const engine = new Engine(deps, {
    storedBytes: (tenantId) => machines!.storedBytes(tenantId),
    collect: () => machines!.collectTemplates(),
    backups: { store: (...a) => machines!.backups().store(...a) },
  });
  machines = new Machines(deps, engine.contextAccess(), cluster?.blobs);
  const peers = cluster?.peers;
  const worker = cluster?.worker;
  const maxLoad = config.cluster?.localityMaxLoad ?? null;
  // Where operations run: here (one server), or on the worker that holds what they act on.
  const m = machines;
  const router = worker ? new ClusterRouter({
    ...(maxLoad !== null ? { locality: { route: (tenantId: string, context: string) => worker.preferred(tenantId, context, maxLoad), unreachable: (to: string) => worker.unreachable(to) } } : {}),
    machineOwner: (id) => m.ownerApi(id),
    serviceOwner: async (caller, context, name) => (await engine.services.elsewhere(caller, context, name))?.api ?? null,
  }) : new HereRouter();
  const ops = new Operations({ engine, machines, events }, router);
  const e2b = new E2bCompat(ops, { ...(deps.cluster ? { cluster: deps.cluster } : {}), ...(peers ? { peers } : {}) }, log);
  try {
    await engine.recover();
    await runtime.start();
    await machines.open();
    await e2b.open();
  } catch (e) {
    // Nothing of a failed start stays mounted.
    e2b.close();
    await machines.close().catch(() => undefined);
    await engine.close().catch(() => undefined);
    await events.close().catch(() => undefined);
    await runtime.close().catch(() => undefined);
    await layers.close();
    await cluster?.close();
    await metadata.close();
    rmSync(pidFile, { force: true });
    throw e;
  }
  engine.gc.start();
  events.start();
  const adminKeyFile = await engine.tenants.ensureAdmin();
  // With mutual TLS between workers, a client certificate is asked for (not required: clients have
  // none) and checked against the cluster's CA; a request passed by a worker must show one (api/forward.ts).
  const mutual = config.cluster?.clientAuth && config.cluster.tlsCa ? { requestCert: true, rejectUnauthorized: false, ca: readFileSync(config.cluster.tlsCa) } : {};
  const tls = config.tls ? { cert: readFileSync(config.tls.cert), key: readFileSync(config.tls.key), ...mutual } : undefined;
  const app = await buildApi({ ops, e2b, log, metrics: meter.registry, http: config.http, ...(peers ? { peers } : {}), ...(tls ? { tls } : {}) });
  await app.listen({ host: config.host, port: config.port });
  const gateway = startGateway(ops, log, { ...(peers ? { peers } : {}), ...(tls ? { tls } : {}) });
  await new Promise<void>((resolve, reject) => {
    gateway.once('error', reject);
    gateway.listen(config.gatewayPort, config.host, () => resolve());
  });
  const hostPart = config.host.includes(':') ? `[${config.host}]` : config.host;
  const portOf = (s: typeof gateway) => { const a = s.address(); return typeof a === 'object' && a ? a.port : 0; };
  // Port 0 (tests) means "any": services' URLs must name the port the gateway got.
  config.gatewayPort = portOf(gateway);
  const scheme = tls ? 'https' : 'http';
  const url = `${scheme}://${hostPart}:${portOf(app.server)}`;
  const gatewayUrl = `${scheme}://${hostPart}:${config.gatewayPort}`;
  // Other workers reach this one at its advertised host (or where it listens), the gateway at its port there.
  const advertised = new URL(config.cluster?.advertise ?? url);
  address = { api: advertised.href.replace(/\/$/, ''), gateway: `${advertised.protocol}//${advertised.hostname}:${config.gatewayPort}` };
  await cluster?.worker.start();
  if (!tls && !/^(127\.|::1$|localhost$)/.test(config.host)) {
    // Without --tls-cert/--tls-key, beyond loopback TLS must come from in front (docs/deploy.md).
    log.warn({ host: config.host }, 'serving plain HTTP (no TLS) beyond loopback: API keys, data and other workers\' forwarded requests cross the network unencrypted; '
      + 'give --tls-cert and --tls-key (SHELLBASE_TLS_CERT, SHELLBASE_TLS_KEY) or put a TLS proxy in front (docs/deploy.md)');
    console.error(`shellbase: WARNING: serving plain HTTP on ${config.host}, beyond loopback: give --tls-cert and --tls-key (docs/deploy.md)`);
  }
  let closing: Promise<void> | null = null;
  return {
    url, gatewayUrl, adminKeyFile, engine, machines,
    async writeRootfs(version, out) {
      const v = await metadata.versions.get(version);
      if (!v) throw new Error(`version ${version} does not exist`);
      await writeRootfs(layers, runtime, v.layers, out);
    },
    close: () => (closing ??= (async () => {
      gateway.closeAllConnections();
      await new Promise((r) => gateway.close(r));
      await app.close();
      e2b.close();
      await machines!.close();
      await engine.close();
      await events.close();
      await deps.egress.close();
      await runtime.close();
      await layers.close();
      await cluster?.close();
      await metadata.close();
      rmSync(pidFile, { force: true });
    })()),
  };
}

const runner = (g: GroupSync) => () => g.run();

/** The home's own layer store (btrfs). */
function localSnapshotter(config: ServerConfig, dialer: Dialer): BtrfsSnapshotter {
  return new BtrfsSnapshotter({
    root: path.join(config.home, 'store'),
    imageFile: path.join(config.home, 'store.btrfs'),
    sizeGb: config.storeSizeGb,
    imagePath: (id) => imageRootfs(config.cache, id),
    defaultDiskMb: config.defaults.diskMb,
    rootId: SANDBOX_ROOT,
    dialer,
  });
}

/**
 * Restores a backup (`shellbase restore`) into the configured home, which must be empty and have
 * no server running over it (engine/transfer/restore.ts); the next server started over the home
 * serves what the backup holds.
 */
export async function restoreServer(config: ServerConfig, from: string, opts: RestoreOptions & { s3Endpoint?: string }, progress?: (p: RestoreProgress) => void): Promise<RestoreResult> {
  assertNativeBuilt();
  if (config.cluster) throw new Error('a backup is restored into an embedded server\'s home: start without --metadata and --blobs (to move into a cluster, restore, then migrate)');
  // Checked before anything is opened: a home in use is not touched at all.
  const pidFile = path.join(config.home, 'server.pid');
  if (existsSync(path.join(config.home, 'meta.db')) || serverAlive(pidFile)) {
    throw new ShellbaseError('failed_precondition', `the home ${config.home} is not empty (it has a server's metadata): a backup is restored only into an empty home`, {
      hint: 'point SHELLBASE_HOME at a new directory, or move this one away first',
    });
  }
  const source = openBlobStore(from, opts.s3Endpoint ? { endpoint: opts.s3Endpoint } : {});
  mkdirSync(config.home, { recursive: true, mode: 0o711 });
  chmodSync(config.home, 0o711);
  claimHome(pidFile);
  const dialer = new Dialer(path.join(config.home, 'streams'));
  const local = localSnapshotter(config, dialer);
  try {
    await local.open();
    const layout = new MachineLayout(config.home, config.cache);
    const log = pino({ level: process.env.SHELLBASE_LOG_LEVEL ?? 'warn' });
    return await restoreHome(source, {
      home: config.home, layers: local, dialer, machines: (md, files) => restoreMachineFiles(source, layout, md, log, dialer, files),
    }, { ...(opts.id !== undefined ? { id: opts.id } : {}) }, progress);
  } finally {
    await local.close().catch(() => undefined);
    (source as { close?: () => void }).close?.();
    rmSync(pidFile, { force: true });
  }
}

/**
 * Moves this home's data (an embedded server's, stopped) into a cluster's stores (`shellbase
 * migrate`: engine/transfer/migrate.ts); workers started on those stores then serve it.
 */
export async function migrateServer(config: ServerConfig, to: { metadata: string; blobs: string; s3Endpoint?: string }, progress?: (p: MigrateProgress) => void): Promise<MigrateResult> {
  assertNativeBuilt();
  const pidFile = path.join(config.home, 'server.pid');
  if (serverAlive(pidFile)) throw new ShellbaseError('failed_precondition', `a server runs over ${config.home}`, { hint: 'stop it first: a migration copies a home that nothing changes' });
  if (!existsSync(path.join(config.home, 'meta.db'))) throw new ShellbaseError('failed_precondition', `${config.home} holds no server's data (no meta.db)`, { hint: 'point SHELLBASE_HOME at the embedded server\'s home' });
  const { PostgresMetadataStore } = await import('./store/metadata/postgres/postgres-store.js');
  if (!/^postgres(ql)?:\/\//.test(to.metadata)) throw new ShellbaseError('invalid_argument', 'a cluster keeps its metadata in Postgres', { hint: 'pass --metadata postgres://USER:PASSWORD@HOST:PORT/DATABASE' });
  const blobs = openBlobStore(to.blobs, to.s3Endpoint ? { endpoint: to.s3Endpoint } : {});
  claimHome(pidFile);
  const dialer = new Dialer(path.join(config.home, 'streams'));
  const local = localSnapshotter(config, dialer);
  // Read only: the home stays as it was (a schema older than this version's is refused, not migrated).
  const metadata = new SqliteSnapshot(path.join(config.home, 'meta.db'));
  if (metadata.schema !== SCHEMA_VERSION) {
    await metadata.close();
    rmSync(pidFile, { force: true });
    throw new ShellbaseError('failed_precondition', `the home's metadata is of schema ${metadata.schema}; this version migrates schema ${SCHEMA_VERSION}`, {
      hint: 'start and stop the server over the home once with this version, then migrate',
    });
  }
  let target: InstanceType<typeof PostgresMetadataStore> | null = null;
  try {
    target = await PostgresMetadataStore.open(to.metadata);
    await local.open();
    const layout = new MachineLayout(config.home, config.cache);
    const log = pino({ level: process.env.SHELLBASE_LOG_LEVEL ?? 'warn' });
    return await migrateHome({
      home: config.home, metadata, layers: local,
      machines: (b, rows, snaps) => stowForCluster(b, layout, log, dialer, rows, snaps),
    }, { metadata: target, blobs }, progress);
  } finally {
    await local.close().catch(() => undefined);
    await metadata.close();
    await target?.close();
    (blobs as { close?: () => void }).close?.();
    rmSync(pidFile, { force: true });
  }
}

/** Whether the pid file names a live process (this one included). */
function serverAlive(pidFile: string): boolean {
  try {
    const pid = Number(readFileSync(pidFile, 'utf8'));
    if (!(pid > 0)) return false;
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Refuses to share a data directory with a live server; takes it over from a dead one. */
function claimHome(pidFile: string): void {
  try {
    const pid = Number(readFileSync(pidFile, 'utf8'));
    if (pid && pid !== process.pid) {
      process.kill(pid, 0);
      throw new Error(`another shellbase server (pid ${pid}) uses this data directory`);
    }
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ESRCH') throw e;
  }
  writeFileSync(pidFile, String(process.pid));
}

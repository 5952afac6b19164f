import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import type { ClusterConfig } from '../config.js';
import type { Pins } from '../core/pins.js';
import { ShellbaseError } from '../errors.js';
import { openBlobStore } from '../store/blobs/index.js';
import type { BlobStore } from '../store/blobs/types.js';
import { openMetadataStore } from '../store/metadata/index.js';
import { PostgresMetadataStore } from '../store/metadata/postgres/postgres-store.js';
import { ClusterSnapshotter } from '../store/snapshotter/cluster/cluster-snapshotter.js';
import type { LayerTransfer, Snapshotter } from '../store/snapshotter/types.js';
import { ClusterPeers } from './peers.js';
import { ClusterWorker } from './worker.js';

export interface ClusterStores {
  metadata: PostgresMetadataStore;
  blobs: BlobStore;
  snapshotter: ClusterSnapshotter;
  worker: ClusterWorker;
  /** Proofs and connections between workers (core/peers.ts). */
  peers: ClusterPeers;
  close(): Promise<void>;
}

/**
 * A worker's shared stores (config.cluster): Postgres for metadata and coordination, the object
 * store for layers, this host's snapshotter as their cache. `address` is read when the worker
 * joins (after the server listens).
 */
export async function openCluster(config: ClusterConfig, local: Snapshotter & LayerTransfer, pins: Pins,
  address: () => { api: string; gateway: string }, load: () => number, log: Logger): Promise<ClusterStores> {
  const metadata = await openMetadataStore(config.metadata, '');
  if (!(metadata instanceof PostgresMetadataStore)) {
    await metadata.close();
    throw new ShellbaseError('invalid_argument', 'a cluster keeps its metadata in Postgres', { hint: 'pass --metadata postgres://USER:PASSWORD@HOST:PORT/DATABASE' });
  }
  const blobs = openBlobStore(config.blobs, config.s3Endpoint ? { endpoint: config.s3Endpoint } : {});
  try {
    await metadata.cluster.ready;
    await metadata.listen();
    // Fails here, at start, when the bucket is missing or holds another layout.
    await blobs.list({ limit: 1 });
  } catch (e) {
    await metadata.close();
    closeBlobs(blobs);
    throw e;
  }
  const shared = metadata.cluster;
  const index = {
    recordBlob: shared.recordBlob.bind(shared),
    blobsOf: shared.blobsOf.bind(shared),
    dropBlobs: async (ids: readonly string[]) => { await shared.dropBlobs(ids, config.blobGraceMs); },
  };
  const snapshotter = new ClusterSnapshotter({
    local, blobs, index, maxBytes: config.cacheMaxBytes, inUse: (id) => pins.layerPinned(id), log,
  });
  const worker = new ClusterWorker({
    shared: metadata.cluster, blobs, pins, heartbeatMs: config.heartbeatMs, blobGraceMs: config.blobGraceMs, load, log,
    get address() { return address().api; },
    get gateway() { return address().gateway; },
  });
  let peers: ClusterPeers;
  try {
    peers = new ClusterPeers({
      workerId: worker.workerId, secret: await clusterSecret(config, shared), ...(config.tlsCa ? { ca: readFileSync(config.tlsCa) } : {}),
      ...(config.clientAuth ? { clientCert: { cert: readFileSync(config.clientAuth.cert), key: readFileSync(config.clientAuth.key) } } : {}),
    });
  } catch (e) {
    await metadata.close();
    closeBlobs(blobs);
    throw e;
  }
  return {
    metadata, blobs, snapshotter, worker, peers,
    async close() {
      await worker.stop();
      closeBlobs(blobs);
    },
  };
}

/**
 * The secret workers sign what they pass to each other with: the file's bytes (SHELLBASE_CLUSTER_SECRET_FILE,
 * trimmed), or the one stored in Postgres (made by the first worker that asked: 32 random bytes).
 */
async function clusterSecret(config: ClusterConfig, shared: ClusterStores['metadata']['cluster']): Promise<Buffer> {
  if (config.secretFile) {
    const secret = Buffer.from(readFileSync(config.secretFile, 'utf8').trim());
    if (secret.length < 32) throw new ShellbaseError('invalid_argument', `the cluster secret in ${config.secretFile} is shorter than 32 bytes`, { hint: 'openssl rand -hex 32 > FILE (the same file on every worker)' });
    return secret;
  }
  return Buffer.from(await shared.secret('forward', randomBytes(32).toString('hex')));
}

function closeBlobs(blobs: BlobStore): void {
  (blobs as { close?: () => void }).close?.();
}

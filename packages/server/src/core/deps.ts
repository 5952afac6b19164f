import type { Dialer } from '../util/dialer.js';
import type { Logger } from 'pino';
import type { ServerConfig } from '../config.js';
import type { Snapshotter } from '../store/snapshotter/types.js';
import type { MetadataStore, TenantQuotas } from '../store/metadata/types.js';
import type { Meter } from '../meter/types.js';
import type { ArchiveUnpacking, HostPrograms, SandboxRuntime } from '../runtime/types.js';
import type { Hold, Pins } from './pins.js';
import type { NetworkPolicy } from '@shellbase/protocol';
import type { Egress } from '../net/egress.js';
import type { Forwarder } from '../net/forwarder.js';
import type { Cluster } from './cluster.js';
import type { Peers } from './peers.js';
import type { TrustLayers } from '../trust/index.js';
import type { EventSink } from '../events/index.js';

/** Who is calling: every engine operation acts inside one tenant. */
export interface Caller {
  tenantId: string;
  admin: boolean;
  /** The tenant's own quotas (absent ones fall back to the server's). */
  quotas?: TenantQuotas;
  /** The tenant's own egress policy (absent: the server's default). */
  network?: NetworkPolicy;
  /** Pins what this caller's operation looks up until the operation ends (see pins.ts). */
  hold: Hold;
}

/**
 * Power-loss durability (docs/architecture.md, Durability): `layers()` before a
 * metadata transaction refers to new layers, `metadata()` before a write is
 * acknowledged. Concurrent callers share one sync.
 */
export interface Durability {
  layers(): Promise<void>;
  metadata(): Promise<void>;
}

/** Runs `work`, then makes what it committed to the metadata durable before its answer. */
export async function durably<T>(d: Durability, work: () => Promise<T>): Promise<T> {
  const result = await work();
  await d.metadata();
  return result;
}

export interface Deps {
  config: ServerConfig;
  metadata: MetadataStore;
  snapshotter: Snapshotter;
  /** Sandboxes and tar unpacking: every runtime has them. */
  runtime: SandboxRuntime & ArchiveUnpacking;
  /** Bridges, helpers, jails and cgroups beside the sandboxes (services' ports, machines); absent in the fast tier. */
  host?: HostPrograms;
  /** Streams to and from programs the spawner starts, so the server never forks (util/dialer.ts). */
  dialer: Dialer;
  log: Logger;
  meter: Meter;
  pins: Pins;
  durability: Durability;
  /** Where what happens is reported (events/: the stream, webhooks). */
  events: EventSink;
  /** The egress enforcement point (net/egress.ts). */
  egress: Egress;
  /** sbx-forward in the data directory: ports on a sandbox's 127.0.0.1 that reach the server. */
  forwarder: Forwarder;
  /** The host's TLS authorities as an overlay for sandboxes and machines (trust/); absent: none. */
  trust?: TrustLayers;
  /** The other workers, in cluster mode (core/cluster.ts); absent in the embedded default. */
  cluster?: Cluster;
  /** Proofs and connections between workers, in cluster mode (core/peers.ts). */
  peers?: Peers;
}

/** Tenant id of versions every tenant may read: the root versions of images. */
export const SYSTEM_TENANT = '';

import type { ConnectionKind, GcResult } from '@shellbase/protocol';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { inBackground } from '../util/background.js';
import { StallMonitor } from './stalls.js';
import type { CommitResult, Meter, QueryOutcome } from './types.js';

/** The engine's meter as Prometheus metrics, served at GET /metrics. */
export class PrometheusMeter implements Meter {
  readonly registry = new Registry();
  private readonly queries = new Counter({
    name: 'shellbase_queries_total', help: 'Queries run, by outcome and what their commit did.',
    labelNames: ['outcome', 'commit'] as const, registers: [this.registry],
  });
  private readonly queryDuration = new Histogram({
    name: 'shellbase_query_duration_seconds', help: 'Wall time of a query sandbox, from start to exit.',
    buckets: [0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300], registers: [this.registry],
  });
  private readonly machineSteps = new Histogram({
    name: 'shellbase_machine_step_seconds', help: 'Machine restores (to a running guest), adoptions of ready VMs by creates, freezes (the source\'s pause in a fork or snapshot) and hibernations.',
    labelNames: ['step'] as const, buckets: [0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30], registers: [this.registry],
  });
  private readonly files = new Counter({
    name: 'shellbase_file_operations_total', help: 'Files API operations (no sandbox).',
    labelNames: ['op'] as const, registers: [this.registry],
  });
  private readonly squashes = new Counter({
    name: 'shellbase_squashes_total', help: 'Layer chains squashed.', registers: [this.registry],
  });
  private readonly squashedLayers = new Counter({
    name: 'shellbase_squashed_layers_total', help: 'Layers folded into squashed layers.', registers: [this.registry],
  });

  private readonly gcRuns = new Counter({
    name: 'shellbase_gc_runs_total', help: 'Garbage collection runs.', registers: [this.registry],
  });
  private readonly gcVersions = new Counter({
    name: 'shellbase_gc_versions_dropped_total', help: 'Versions dropped by garbage collection.', registers: [this.registry],
  });
  private readonly gcBytes = new Counter({
    name: 'shellbase_gc_freed_bytes_total', help: 'Bytes of layers garbage collection deleted.', registers: [this.registry],
  });

  private readonly egressConnections = new Counter({
    name: 'shellbase_egress_connections_total', help: 'Connections sandboxes asked the egress proxy for, by what made them and whether the policy allowed them.',
    labelNames: ['kind', 'result'] as const, registers: [this.registry],
  });
  private readonly egressBytes = new Counter({
    name: 'shellbase_egress_bytes_total', help: 'Bytes through the egress proxy: out (egressBytes, sent by sandboxes) and in (ingressBytes).',
    labelNames: ['kind', 'direction'] as const, registers: [this.registry],
  });

  private readonly archiveLayers = new Counter({
    name: 'shellbase_export_layers_total', help: 'Layers written into exported context archives: by a helper straight into the client\'s connection (by="helper"), or through the server.',
    labelNames: ['by'] as const, registers: [this.registry],
  });

  private readonly activeSeconds = new Counter({
    name: 'shellbase_active_seconds_total', help: 'Active (billed) time of service runs and machines: a request, connection, call or start in progress.',
    labelNames: ['kind'] as const, registers: [this.registry],
  });
  private readonly idleSeconds = new Counter({
    name: 'shellbase_idle_seconds_total', help: 'Idle time of service runs and machines before they slept (wall minus active): what idle costs the platform.',
    labelNames: ['kind'] as const, registers: [this.registry],
  });

  /** `storedBytes` is read at every scrape (the sum over layer rows, not a disk walk). */
  constructor(sources: { storedBytes(): Promise<number> }) {
    collectDefaultMetrics({ register: this.registry, prefix: 'shellbase_' });
    new Gauge({
      name: 'shellbase_stored_bytes', help: 'Bytes of file data in stored layers (each layer once).', registers: [this.registry],
      // A scrape is not a request's work: its round trip is counted as background.
      async collect() { this.set(await inBackground(() => sources.storedBytes())); },
    });
    const stalls = new StallMonitor();
    stalls.start();
    new Gauge({
      name: 'shellbase_eventloop_stall_max_seconds',
      help: "The event loop's worst delay since the last scrape that the server itself caused (JavaScript running or a blocking call), "
        + 'not counting time its thread waited for a busy CPU (Linux); shellbase_nodejs_eventloop_lag_max_seconds counts both.',
      registers: [this.registry],
      collect() { this.set(stalls.take() / 1000); },
    });
  }

  /**
   * Serves the metadata store's round trips (a cluster's Postgres, counted by the store) as
   * `shellbase_metadata_round_trips_total{work="request"|"background"}`, read at each scrape.
   */
  watchRoundTrips(read: () => { request: number; background: number }): void {
    new Counter({
      name: 'shellbase_metadata_round_trips_total', help: 'Round trips to the metadata database (Postgres): those requests wait for, and background work\'s (heartbeats, garbage collection, squashes).',
      labelNames: ['work'] as const, registers: [this.registry],
      collect() {
        const now = read();
        this.reset();
        this.inc({ work: 'request' }, now.request);
        this.inc({ work: 'background' }, now.background);
      },
    });
  }

  gcRan(result: GcResult): void {
    this.gcRuns.inc();
    this.gcVersions.inc(result.versionsDropped);
    this.gcBytes.inc(result.bytesFreed);
  }

  queryEnded(outcome: QueryOutcome, wallMs: number, commit: CommitResult): void {
    this.queries.inc({ outcome, commit });
    this.queryDuration.observe(wallMs / 1000);
  }

  machineStep(step: 'restore' | 'adopt' | 'freeze' | 'hibernate', ms: number): void {
    this.machineSteps.observe({ step }, ms / 1000);
  }

  runEnded(kind: 'service' | 'machine', wallMs: number, activeMs: number): void {
    const active = Math.min(activeMs, wallMs);
    this.activeSeconds.inc({ kind }, active / 1000);
    this.idleSeconds.inc({ kind }, Math.max(0, wallMs - active) / 1000);
  }

  egressConnection(kind: ConnectionKind, allowed: boolean, bytesOut: number, bytesIn: number): void {
    this.egressConnections.inc({ kind, result: allowed ? 'allowed' : 'refused' });
    if (bytesOut) this.egressBytes.inc({ kind, direction: 'out' }, bytesOut);
    if (bytesIn) this.egressBytes.inc({ kind, direction: 'in' }, bytesIn);
  }

  archiveLayer(by: 'helper' | 'server'): void {
    this.archiveLayers.inc({ by });
  }

  fileOperation(op: 'read' | 'write' | 'delete' | 'tar'): void {
    this.files.inc({ op });
  }

  squashed(layers: number): void {
    this.squashes.inc();
    this.squashedLayers.inc(layers);
  }
}

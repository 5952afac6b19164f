/**
 * What the engine reports as it works, for metrics (and, with tenants,
 * the usage ledger). The engine calls these; it knows nothing of Prometheus.
 */
import type { ConnectionKind, GcResult } from '@shellbase/protocol';

export type QueryOutcome = 'ok' | 'failed' | 'timeout' | 'oom' | 'aborted';
export type CommitResult = 'committed' | 'conflict' | 'nothing' | 'discarded';

export interface Meter {
  queryEnded(outcome: QueryOutcome, wallMs: number, commit: CommitResult): void;
  fileOperation(op: 'read' | 'write' | 'delete' | 'tar'): void;
  squashed(layers: number): void;
  gcRan(result: GcResult): void;
  /**
   * A machine lifecycle step ended: how long it took (a freeze is the pause a fork or snapshot
   * costs its source; an adopt, a create's take-over of a ready VM).
   */
  machineStep(step: 'restore' | 'adopt' | 'freeze' | 'hibernate', ms: number): void;
  /** A service run or machine segment ended: its wall time and the active part of it (the rest is idle, the platform's). */
  runEnded(kind: 'service' | 'machine', wallMs: number, activeMs: number): void;
  /** A connection through the egress proxy ended (or was refused): what made it and the bytes it moved. */
  egressConnection(kind: ConnectionKind, allowed: boolean, bytesOut: number, bytesIn: number): void;
  /** A layer went into a context archive: by a helper straight into the client's connection, or through the server. */
  archiveLayer(by: 'helper' | 'server'): void;
}

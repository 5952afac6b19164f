import { Type } from 'typebox';
import { strict } from './common.js';

/** Usage (`GET /v1/usage`) and garbage collection (`POST /v1/gc`, admin only). */

export const UsageQuerySchema = Type.Object({
  from: Type.Optional(Type.String({ maxLength: 64 })),
  to: Type.Optional(Type.String({ maxLength: 64 })),
  groupBy: Type.Optional(Type.Union([Type.Literal('context'), Type.Literal('kind'), Type.Literal('day'), Type.Literal('hour')])),
  tenant: Type.Optional(Type.String({ maxLength: 128 })),
}, strict);

export const UsageItemSchema = Type.Object({
  key: Type.String(), queries: Type.Integer(), cpuMs: Type.Number(), wallMs: Type.Number(),
  /** Wall time of service runs, idle tails included (capacity), and of machines' running stretches. */
  serviceSeconds: Type.Number(),
  machineSeconds: Type.Number(),
  /** The billed part: service runs' time with a request, connection or start in progress; machines' with a call, connection or guest CPU in use. */
  serviceActiveSeconds: Type.Number(),
  machineActiveSeconds: Type.Number(),
  /** Machines' running time weighted by their memory (MiB × seconds). */
  machineMbSeconds: Type.Number(),
  /** Bytes sent and received through the egress proxy by queries, services and machines. */
  egressBytes: Type.Number(),
  ingressBytes: Type.Number(),
  /** Layers (per context: its head's; in the total: every distinct layer) and, in the total, machines' disks, snapshots and hibernated memory. */
  bytesStored: Type.Number(),
}, { title: 'UsageItem' });

export const GcResultSchema = Type.Object({
  versionsDropped: Type.Integer(),
  /** Layer directories deleted (including ones deferred from earlier runs). */
  layersDeleted: Type.Integer(),
  /** Bytes of the layers no version refers to any more. */
  bytesFreed: Type.Number(),
  /** Layers unreferenced but still used by running work: deleted by a later run. */
  deferredLayers: Type.Integer(),
  /** Machine templates of tenants' versions that nothing stood on and nobody used for a while. */
  templatesDeleted: Type.Integer(),
  /** Usage ledger rows older than a day folded into hourly rows. */
  usageRowsRolledUp: Type.Integer(),
  /** False when the pass stopped at its time budget (SHELLBASE_GC_BUDGET_MS): the next pass goes on from there. */
  complete: Type.Boolean(),
  ms: Type.Number(),
}, { title: 'GcResult', description: 'What one garbage collection run did (`POST /v1/gc`, admin only).' });

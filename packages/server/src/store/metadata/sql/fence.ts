import { ShellbaseError } from '../../../errors.js';
import type { LeaseFence } from '../rows.js';
import type { SqlDb } from './db.js';

/**
 * Throws `failed_precondition` unless the lease is still the fence's worker's at its epoch. Run in
 * the transaction of the write it guards: on Postgres the lease row is read FOR SHARE, so a
 * takeover waits for the write or the write sees the takeover. Cluster mode only: Postgres alone
 * has `cluster_leases`.
 */
export async function checkFence(db: SqlDb, f: LeaseFence): Promise<void> {
  const held = await db.get(`SELECT 1 AS x FROM cluster_leases WHERE kind = ? AND key = ? AND worker_id = ? AND epoch = ?${db.dialect === 'postgres' ? ' FOR SHARE' : ''}`,
    [f.kind, f.key, f.worker, f.epoch]);
  if (!held) {
    throw new ShellbaseError('failed_precondition', `this worker's lease of ${f.kind} ${f.key} (epoch ${f.epoch}) was taken over: its work is not committed`, {
      details: { kind: f.kind, epoch: f.epoch }, hint: 'another worker runs it now; its writes are the ones that count',
    });
  }
}

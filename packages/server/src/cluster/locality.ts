import { createHash } from 'node:crypto';

/** A live worker as placement sees it: where it answers and how much it runs (its last heartbeat's load). */
export interface Peer {
  id: string;
  address: string;
  load: number;
}

/**
 * Workers ranked for a key by rendezvous (highest random weight) hashing: each worker's weight
 * is a hash of the key and its id, the highest first. Every worker ranks the same way from the
 * same list, and a worker joining or leaving moves only the keys it wins or held.
 */
export function rank<T extends { id: string }>(key: string, workers: readonly T[]): T[] {
  const weight = (w: T) => createHash('sha256').update(key).update('\0').update(w.id).digest().readBigUInt64BE(0);
  return workers.map((w) => ({ w, h: weight(w) })).sort((a, b) => (a.h > b.h ? -1 : a.h < b.h ? 1 : 0)).map((x) => x.w);
}

/**
 * Where a query of `key` (a tenant's context) should run: the key's preferred worker when it is
 * another live worker whose load is under `maxLoad` (so its cache of the context's layers stays
 * warm); null to run it here — this worker is the preferred one, or the preferred one is
 * overloaded (the query spills here), or nothing is known of the others.
 */
export function placeQuery(key: string, self: string, peers: readonly Peer[], maxLoad: number): Peer | null {
  const [preferred] = rank(key, peers);
  if (!preferred || preferred.id === self || preferred.load >= maxLoad) return null;
  return preferred;
}

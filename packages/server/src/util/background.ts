import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Marks work that no request waits for (heartbeats, garbage collection, squashes), so what it
 * costs can be counted apart from what requests cost: the metadata store's round trips are
 * (store/metadata/postgres/postgres-db.ts). The mark follows the work through its awaits.
 */
const marks = new AsyncLocalStorage<true>();

/** Runs `fn` (and everything it awaits or schedules) as background work. */
export function inBackground<T>(fn: () => T): T {
  return marks.run(true, fn);
}

/** Whether the caller runs as background work. */
export function isBackground(): boolean {
  return marks.getStore() === true;
}

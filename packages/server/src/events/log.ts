import type { Logger } from 'pino';
import { inBackground } from '../util/background.js';
import type { EventFilter, EventRepository, EventRow, NewEvent } from '../store/metadata/types.js';

/** What parts of the server emit into: fire and forget (the event is written within a tick, after the change it reports). */
export interface EventSink {
  emit(event: Omit<NewEvent, 'time'> & { time?: string }): void;
}

/** A sink that drops everything (a fast-tier engine with no event log). */
export const NO_EVENTS: EventSink = { emit: () => undefined };

type Listener = (event: EventRow) => void;

/** How far back another worker's events are looked for again (a row can become visible after one with a higher id). */
const LATE_MS = 3_000;
/** How often a worker of a cluster reads the events others stored, while someone here listens; rows a read takes at most. */
const POLL_MS = 100;
const READ_PAGE = 1000;
/** Events held for a store that failed, at most (the oldest go past it). */
const MAX_PENDING = 100_000;
/** The wait before writing again after the store failed. */
const RETRY_MS = 1_000;

export function matches(filter: EventFilter, e: EventRow): boolean {
  if (filter.kinds?.length && !filter.kinds.includes(e.kind)) return false;
  if (filter.context !== undefined && e.context !== filter.context) return false;
  if (filter.machine !== undefined && e.machine !== filter.machine) return false;
  if (filter.lifecycleTypes?.length && !(e.kind === 'sandbox.lifecycle' && filter.lifecycleTypes.includes(String(e.data.type)))) return false;
  return true;
}

/**
 * The event log: what the engine, the services, the machines and the front doors emit is
 * written to the metadata store in batches (one transaction a tick, which also queues webhook
 * deliveries) and handed to this worker's listeners as soon as it has its id; a batch the store
 * refused is kept and written again. In a cluster, a worker with listeners also reads the events
 * other workers stored (every POLL_MS: those after the last id it saw, and LATE_MS back for rows
 * that became visible after higher ids; each handed on once).
 */
export class EventLog implements EventSink {
  private pending: NewEvent[] = [];
  private flushing: Promise<void> = Promise.resolve();
  private scheduled = false;
  private readonly listeners = new Map<string, Set<Listener>>();
  private listening = 0;
  private timer: NodeJS.Timeout | null = null;
  private cursor = 0;
  /** Ids handed on recently (another worker's rows are read more than once). */
  private readonly seen = new Map<number, number>();
  /** Told after events are stored that queued webhook deliveries (the deliverer). */
  onQueued: () => void = () => undefined;

  constructor(private readonly repo: EventRepository, private readonly log: Logger, private readonly opts: { readOthers: boolean }) {}

  emit(event: Omit<NewEvent, 'time'> & { time?: string }): void {
    this.pending.push({ ...event, time: event.time ?? new Date().toISOString() });
    if (this.scheduled) return;
    this.scheduled = true;
    // Off the request's path: no request waits for it (its round trips count as background work).
    setImmediate(() => { this.scheduled = false; void inBackground(() => this.flush()); });
  }

  /** Writes what was emitted and hands it on (shutdown and tests wait for it). */
  flush(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return this.flushing;
    this.flushing = this.flushing.then(async () => {
      const { events, deliveries } = await this.repo.append(batch);
      this.publish(events);
      if (deliveries > 0) this.onQueued();
    }).catch((err: unknown) => {
      // Kept, in order, for the next write (a store that is down for a while drops the oldest past MAX_PENDING).
      this.pending = [...batch, ...this.pending];
      const dropped = this.pending.length - MAX_PENDING;
      if (dropped > 0) this.pending.splice(0, dropped);
      this.log.error({ err, events: batch.length, dropped: Math.max(0, dropped) }, 'writing events failed; trying again');
      if (!this.closed) setTimeout(() => void this.flush(), RETRY_MS).unref();
    });
    return this.flushing;
  }

  /** Hands `listener` each new event of the tenant from now on; the returned function stops it. */
  subscribe(tenantId: string, listener: Listener): () => void {
    let set = this.listeners.get(tenantId);
    if (!set) this.listeners.set(tenantId, (set = new Set()));
    set.add(listener);
    this.listening++;
    if (this.opts.readOthers && !this.timer) void inBackground(() => this.startReading());
    return () => {
      if (!set.delete(listener)) return;
      if (set.size === 0) this.listeners.delete(tenantId);
      if (--this.listening === 0 && this.timer) { clearTimeout(this.timer); this.timer = null; }
    };
  }

  private publish(rows: readonly EventRow[]): void {
    const now = Date.now();
    for (const e of rows) {
      if (this.seen.has(e.id)) continue;
      this.seen.set(e.id, now);
      this.cursor = Math.max(this.cursor, e.id);
      for (const l of this.listeners.get(e.tenantId) ?? []) {
        try { l(e); } catch (err) { this.log.warn({ err }, 'an event listener failed'); }
      }
    }
    for (const [id, at] of this.seen) { if (now - at > 2 * LATE_MS) this.seen.delete(id); else break; }
  }

  private async startReading(): Promise<void> {
    this.timer = setTimeout(() => undefined, 0);
    // Only what is stored from now on is new to this worker's listeners.
    this.cursor = Math.max(this.cursor, await this.repo.lastId().catch(() => 0));
    const read = async () => {
      try {
        for (;;) {
          const page = await this.repo.recent(this.cursor, READ_PAGE);
          this.publish(page);
          if (page.length < READ_PAGE) break;
        }
        this.publish(await this.repo.late(this.cursor, new Date(Date.now() - LATE_MS).toISOString(), READ_PAGE));
      } catch (err) {
        this.log.warn({ err }, 'reading other workers\' events failed');
      }
      if (this.timer) this.timer = setTimeout(() => void read(), POLL_MS);
    };
    if (this.timer) this.timer = setTimeout(() => void read(), POLL_MS);
  }

  private closed = false;

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) { clearTimeout(this.timer); this.timer = null; }
    this.listeners.clear();
    this.listening = 0;
    await this.flush();
  }
}

import type { Logger } from 'pino';
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
/** How often a worker of a cluster reads the events others stored, while someone here listens. */
const POLL_MS = 100;

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
 * deliveries) and handed to this worker's listeners as soon as it has its id. In a cluster, a
 * worker with listeners also reads the events other workers stored (every POLL_MS, looking
 * LATE_MS back for rows that became visible late, each handed on once).
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
  /** Told after events are stored (the webhook deliverer). */
  onStored: (events: EventRow[]) => void = () => undefined;

  constructor(private readonly repo: EventRepository, private readonly log: Logger, private readonly opts: { readOthers: boolean }) {}

  emit(event: Omit<NewEvent, 'time'> & { time?: string }): void {
    this.pending.push({ ...event, time: event.time ?? new Date().toISOString() });
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => { this.scheduled = false; void this.flush(); });
  }

  /** Writes what was emitted and hands it on (shutdown and tests wait for it). */
  flush(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return this.flushing;
    this.flushing = this.flushing.then(async () => {
      const rows = await this.repo.append(batch);
      this.publish(rows);
      this.onStored(rows);
    }).catch((err: unknown) => this.log.error({ err, events: batch.length }, 'writing events failed'));
    return this.flushing;
  }

  /** Hands `listener` each new event of the tenant from now on; the returned function stops it. */
  subscribe(tenantId: string, listener: Listener): () => void {
    let set = this.listeners.get(tenantId);
    if (!set) this.listeners.set(tenantId, (set = new Set()));
    set.add(listener);
    this.listening++;
    if (this.opts.readOthers && !this.timer) void this.startReading();
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
    if (this.cursor === 0) this.cursor = await this.repo.lastId().catch(() => 0);
    const read = async () => {
      try {
        this.publish(await this.repo.recent(this.cursor, new Date(Date.now() - LATE_MS).toISOString(), 1000));
      } catch (err) {
        this.log.warn({ err }, 'reading other workers\' events failed');
      }
      if (this.timer) this.timer = setTimeout(() => void read(), POLL_MS);
    };
    if (this.timer) this.timer = setTimeout(() => void read(), POLL_MS);
  }

  async close(): Promise<void> {
    if (this.timer) { clearTimeout(this.timer); this.timer = null; }
    this.listeners.clear();
    this.listening = 0;
    await this.flush();
  }
}

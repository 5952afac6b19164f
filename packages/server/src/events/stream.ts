import type { EventFilter, EventRepository, EventRow } from '../store/metadata/types.js';
import { matches, type EventLog } from './log.js';

/** Events read back a page at a time when a stream resumes. */
const REPLAY_PAGE = 1000;

export interface StreamRequest {
  filter: EventFilter;
  /** Resume after this id (`Last-Event-ID`): what is still kept after it comes first. Null: new events only. */
  after: number | null;
  send(event: EventRow): void;
}

/**
 * A tenant's events as a stream: the kept ones after `after` (oldest first), then each new one as
 * it is stored, every event once and in id order (new events that arrive while the kept ones are
 * read wait behind them). The returned function ends it.
 */
export async function openStream(log: EventLog, repo: EventRepository, tenantId: string, req: StreamRequest): Promise<() => void> {
  let last = req.after ?? 0;
  let held: EventRow[] | null = req.after === null ? null : [];
  const pass = (e: EventRow) => {
    if (e.id <= last || !matches(req.filter, e)) return;
    last = e.id;
    req.send(e);
  };
  const stop = log.subscribe(tenantId, (e) => { if (held) held.push(e); else pass(e); });
  try {
    if (held) {
      for (;;) {
        const page = await repo.since(tenantId, last, REPLAY_PAGE, req.filter);
        for (const e of page) pass(e);
        if (page.length < REPLAY_PAGE) break;
      }
      const waiting: EventRow[] = held;
      held = null;
      for (const e of waiting.sort((a, b) => a.id - b.id)) pass(e);
    }
  } catch (e) {
    stop();
    throw e;
  }
  return stop;
}

import { useEffect, useRef } from 'preact/hooks';
import type { EventsFilter, ShellbaseEvent } from '@shellbase/sdk/core';
import { sb } from '../api/session.js';

/** The wait before streaming again after the stream dropped (doubling up to MAX_RETRY_MS). */
const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 15_000;

/**
 * Calls `onEvent` for each of the tenant's events that passes `filter` while mounted (the server's
 * `/v1/events` stream). A dropped stream is opened again after the last event seen, so none is
 * missed while it is kept; `key` names the filter (a new key, a new stream).
 */
export function useEvents(filter: EventsFilter, key: string, onEvent: (e: ShellbaseEvent) => void): void {
  const ref = useRef(onEvent);
  ref.current = onEvent;
  useEffect(() => {
    let closed = false;
    let close = () => undefined as void;
    let last: string | undefined;
    let wait = FIRST_RETRY_MS;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const open = async () => {
      try {
        const s = await sb.events.stream({ ...filter, ...(last !== undefined ? { after: last } : {}) }, (e) => { last = e.id; wait = FIRST_RETRY_MS; ref.current(e); });
        if (closed) { s.close(); return; }
        close = () => s.close();
        await s.done;
      } catch {
        // dropped, or refused (signed out): tried again below
      }
      if (!closed) timer = setTimeout(() => void open(), (wait = Math.min(wait * 2, MAX_RETRY_MS)));
    };
    void open();
    return () => { closed = true; clearTimeout(timer); close(); };
  }, [key]);
}

import type { Delivery, EventKind, ShellbaseEvent, Webhook, WebhookCreated, WebhookIn } from '@shellbase/protocol';
import type { Transport } from './transport.js';

export interface EventsFilter {
  kinds?: EventKind[];
  context?: string;
  machine?: string;
  /** Resume after this event id (what `stream` hands its callback last). */
  after?: string;
}

/**
 * A stream of events: `close()` ends it; `done` settles when it ends: resolves when closed here or
 * by the server, rejects when the connection drops or the server reports an error (a rejection no
 * one awaits is not an unhandled one).
 */
export interface EventStream {
  close(): void;
  readonly done: Promise<void>;
}

const query = (f: EventsFilter) => ({ kinds: f.kinds?.join(','), context: f.context, machine: f.machine, after: f.after });

/** Parses Server-Sent Events from `body`, handing each event's data to `onEvent`. */
async function readEvents(body: ReadableStream<Uint8Array>, onEvent: (e: ShellbaseEvent) => void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
      const type = block.split('\n').find((l) => l.startsWith('event: '))?.slice(7);
      if (!data) continue;
      if (type === 'error') throw new Error(`the event stream ended: ${(JSON.parse(data) as { message?: string }).message ?? data}`);
      onEvent(JSON.parse(data) as ShellbaseEvent);
    }
  }
}

/** The tenant's events (`GET /v1/events`) and webhooks (`/v1/webhooks`). */
export function eventsApi(t: Transport) {
  return {
    /** The kept events after `filter.after`, oldest first (at most 1,000). */
    list: async (filter: EventsFilter = {}): Promise<ShellbaseEvent[]> =>
      (await t.json<{ events: ShellbaseEvent[] }>('GET', '/v1/events', { query: query(filter) })).events,
    /**
     * Each event as it happens (the kept ones after `filter.after` first). Resolves once the
     * server answered; to resume after a dropped connection, stream again with `after` set to the
     * last id seen.
     */
    stream: async (filter: EventsFilter, onEvent: (e: ShellbaseEvent) => void): Promise<EventStream> => {
      const abort = new AbortController();
      const res = await t.request('GET', '/v1/events', { query: query(filter), accept: 'text/event-stream', signal: abort.signal });
      const done = readEvents(res.body!, onEvent).catch((e: unknown) => { if (!abort.signal.aborted) throw e; });
      done.catch(() => undefined);
      return { close: () => abort.abort(), done };
    },
  };
}

export function webhooksApi(t: Transport) {
  const one = (id: string) => `/v1/webhooks/${encodeURIComponent(id)}`;
  return {
    /** Registers a URL for some kinds of event; the answer carries the signing secret, once. */
    create: (body: WebhookIn): Promise<WebhookCreated> => t.json('POST', '/v1/webhooks', { body }),
    list: async (): Promise<Webhook[]> => (await t.json<{ webhooks: Webhook[] }>('GET', '/v1/webhooks')).webhooks,
    get: (id: string): Promise<Webhook> => t.json('GET', one(id)),
    delete: async (id: string): Promise<void> => { await t.request('DELETE', one(id)); },
    /** Its deliveries, newest first: state, attempts, the receiver's last status or the reason it failed. */
    deliveries: async (id: string, limit?: number): Promise<Delivery[]> =>
      (await t.json<{ deliveries: Delivery[] }>('GET', `${one(id)}/deliveries`, { query: { limit } })).deliveries,
  };
}

import type { Logger } from 'pino';
import { EVENT_KINDS, type EventKind, type NetworkPolicy, type ShellbaseEvent, type WebhookIn } from '@shellbase/protocol';
import { invalid } from '../errors.js';
import type { Egress } from '../net/egress.js';
import type { EventFilter, EventRow, MetadataStore, NewEvent, WebhookRow } from '../store/metadata/types.js';
import { Deliverer, shellbaseFormat, wireEvent, type DeliveryFormat } from './delivery.js';
import { EventLog } from './log.js';
import { openStream } from './stream.js';
import { Webhooks, wireCreated, wireWebhook, type WebhookSpec } from './webhooks.js';

export { EventLog, NO_EVENTS, type EventSink } from './log.js';
export { LIFECYCLE_TYPES } from './webhooks.js';
export { verifyShellbaseSignature, e2bSignature } from './sign.js';
export type { DeliveryFormat } from './delivery.js';
export type { EventRow, WebhookRow } from '../store/metadata/types.js';

/** Whose events: a tenant, with its own egress policy if it has one (a caller, as core/deps.ts has it). */
export interface Who { tenantId: string; network?: NetworkPolicy }

export interface EventsOptions {
  metadata: MetadataStore;
  egress: Egress;
  /** The egress policy of tenants without one of their own. */
  defaultPolicy: NetworkPolicy;
  /** Cluster mode: read the events other workers store for this one's listeners. */
  readOthers: boolean;
  log: Logger;
}

/** Checks kinds named by a reader (comma-separated or repeated). */
export function kindsFilter(kinds: string | readonly string[] | undefined): EventKind[] | undefined {
  if (kinds === undefined) return undefined;
  const list = (typeof kinds === 'string' ? [kinds] : kinds).flatMap((k) => k.split(',')).map((k) => k.trim()).filter(Boolean);
  const unknown = list.find((k) => !(EVENT_KINDS as readonly string[]).includes(k));
  if (unknown !== undefined) throw invalid(`unknown event kind ${JSON.stringify(unknown)}`, `kinds are: ${EVENT_KINDS.join(', ')}`, { field: 'kinds' });
  return list as EventKind[];
}

/** An event id a reader resumes after (`Last-Event-ID`, `after`). */
export function eventId(text: string | undefined): number | null {
  if (text === undefined || text === '') return null;
  if (!/^\d{1,15}$/.test(text)) throw invalid(`${JSON.stringify(text)} is not an event id`, 'pass the id of an event this server sent', { field: 'after' });
  return Number(text);
}

/**
 * Tenants' events: the log parts emit into (log.ts), streams over it (stream.ts), webhooks
 * (webhooks.ts) and their deliverer (delivery.ts).
 */
export class Events {
  readonly log: EventLog;
  private readonly webhooks: Webhooks;
  private readonly deliverer: Deliverer;
  private readonly formats = new Map<WebhookRow['format'], DeliveryFormat>([['shellbase', shellbaseFormat]]);

  constructor(private readonly o: EventsOptions) {
    this.log = new EventLog(o.metadata.events, o.log, { readOthers: o.readOthers });
    this.webhooks = new Webhooks(o.metadata, o.egress, o.defaultPolicy);
    this.deliverer = new Deliverer({ metadata: o.metadata, egress: o.egress, defaultPolicy: o.defaultPolicy, formats: this.formats, log: o.log });
    this.log.onQueued = () => this.deliverer.kick();
  }

  start(): void { this.deliverer.start(); }

  /** A front door's own webhook format (compat/e2b's). */
  addFormat(name: WebhookRow['format'], format: DeliveryFormat): void { this.formats.set(name, format); }

  /** Streams the caller's events (the kept ones after `after` first); the returned function ends it. */
  stream(caller: Who, filter: EventFilter, after: number | null, send: (e: ShellbaseEvent) => void): Promise<() => void> {
    return openStream(this.log, this.o.metadata.events, caller.tenantId, { filter, after, send: (e) => send(wireEvent(e)) });
  }

  /** The caller's kept events after `after`, oldest first. */
  async list(caller: Who, filter: EventFilter, after: number | null, limit: number): Promise<ShellbaseEvent[]> {
    return (await this.o.metadata.events.since(caller.tenantId, after ?? 0, limit, filter)).map(wireEvent);
  }

  /** The caller's events as stored, newest first unless `ascending` (E2B's lifecycle API). */
  page(caller: Who, filter: EventFilter, offset: number, limit: number, ascending: boolean): Promise<EventRow[]> {
    return this.o.metadata.events.page(caller.tenantId, filter, offset, limit, ascending);
  }

  /** An event a front door reports for the caller (E2B sandboxes' lifecycle). */
  emit(caller: Who, event: Omit<NewEvent, 'tenantId' | 'time'>): void {
    this.log.emit({ ...event, tenantId: caller.tenantId });
  }

  createWebhook(caller: Who, body: WebhookIn): Promise<ReturnType<typeof wireCreated>> {
    return this.webhooks.create(caller.tenantId, caller.network, { url: body.url, keys: Webhooks.kinds(body.events), ...(body.name !== undefined ? { name: body.name } : {}), format: 'shellbase' }).then(wireCreated);
  }

  async listWebhooks(caller: Who) { return (await this.webhooks.list(caller.tenantId, 'shellbase')).map(wireWebhook); }
  async getWebhook(caller: Who, id: string) { return wireWebhook(await this.webhooks.get(caller.tenantId, id, 'shellbase')); }
  deleteWebhook(caller: Who, id: string): Promise<void> { return this.webhooks.delete(caller.tenantId, id, 'shellbase'); }
  deliveries(caller: Who, id: string, limit: number) { return this.webhooks.deliveries(caller.tenantId, id, limit); }

  /** Webhooks in a front door's own format (E2B's `/events/webhooks`): rows as stored, for that door to show in its shape. */
  formatted(format: WebhookRow['format']) {
    return {
      create: (caller: Who, spec: Omit<WebhookSpec, 'format'>) => this.webhooks.create(caller.tenantId, caller.network, { ...spec, format }),
      list: (caller: Who) => this.webhooks.list(caller.tenantId, format),
      get: (caller: Who, id: string) => this.webhooks.get(caller.tenantId, id, format),
      update: (caller: Who, id: string, change: Partial<Omit<WebhookSpec, 'format'>>) => this.webhooks.update(caller.tenantId, caller.network, id, format, change),
      delete: (caller: Who, id: string) => this.webhooks.delete(caller.tenantId, id, format),
    };
  }

  /** Writes what was emitted (tests and the bench wait for it). */
  flush(): Promise<void> { return this.log.flush(); }

  async close(): Promise<void> {
    await this.log.close();
    await this.deliverer.close();
  }
}

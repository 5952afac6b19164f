import { randomBytes } from 'node:crypto';
import { EVENT_KINDS, type Delivery, type EventKind, type NetworkPolicy, type Webhook, type WebhookCreated } from '@shellbase/protocol';
import { ShellbaseError, invalid, notFound } from '../errors.js';
import type { Egress } from '../net/egress.js';
import type { DeliveryRow, MetadataStore, WebhookRow } from '../store/metadata/types.js';
import { newId } from '../util/ids.js';

/** A tenant's webhooks at most. */
export const MAX_WEBHOOKS = 16;

/** E2B's sandbox lifecycle types, as a `sandbox.lifecycle` event's `data.type`. */
export const LIFECYCLE_TYPES = ['created', 'paused', 'resumed', 'updated', 'killed', 'checkpointed'] as const;

/** Match keys of native kinds (a `sandbox.lifecycle` subscription takes every type of it). */
export const keysOf = (kinds: readonly EventKind[]): string[] =>
  [...new Set(kinds.flatMap((k) => (k === 'sandbox.lifecycle' ? LIFECYCLE_TYPES.map((t) => `sandbox.lifecycle.${t}`) : [k])))];

/** Native kinds of match keys. */
const kindsOf = (keys: readonly string[]): EventKind[] => [...new Set(keys.map((k) => (k.startsWith('sandbox.lifecycle.') ? 'sandbox.lifecycle' : k) as EventKind))];

export interface WebhookSpec {
  url: string;
  keys: string[];
  name?: string;
  enabled?: boolean;
  /** Chosen by the caller (E2B's `signatureSecret`); generated when absent. */
  secret?: string;
  format: WebhookRow['format'];
}

/** Registration of tenants' webhooks: URLs checked against the egress rules before anything is stored. */
export class Webhooks {
  constructor(private readonly md: MetadataStore, private readonly egress: Egress, private readonly defaultPolicy: NetworkPolicy) {}

  /** Checks a native registration's kinds. */
  static kinds(events: readonly string[]): string[] {
    const unknown = events.filter((k) => !(EVENT_KINDS as readonly string[]).includes(k));
    if (unknown.length) throw invalid(`unknown event kind ${JSON.stringify(unknown[0])}`, `kinds are: ${EVENT_KINDS.join(', ')}`, { field: 'events' });
    return keysOf(events as EventKind[]);
  }

  async create(tenantId: string, policy: NetworkPolicy | undefined, spec: WebhookSpec): Promise<WebhookRow> {
    if ((await this.md.webhooks.list(tenantId)).length >= MAX_WEBHOOKS) {
      throw new ShellbaseError('limit_exceeded', `a tenant has at most ${MAX_WEBHOOKS} webhooks`, { hint: 'delete one first (DELETE /v1/webhooks/{id})' });
    }
    await this.checkUrl(spec.url, policy);
    const row: WebhookRow = {
      id: newId('wh'), tenantId, url: spec.url, keys: spec.keys, name: spec.name ?? '', enabled: spec.enabled ?? true,
      secret: spec.secret ?? randomBytes(24).toString('base64url'), format: spec.format, createdAt: new Date().toISOString(),
    };
    await this.md.webhooks.create(row);
    return row;
  }

  async update(tenantId: string, policy: NetworkPolicy | undefined, id: string, format: WebhookRow['format'], change: Partial<Omit<WebhookSpec, 'format'>>): Promise<WebhookRow> {
    const row = await this.get(tenantId, id, format);
    if (change.url !== undefined) await this.checkUrl(change.url, policy);
    const next: WebhookRow = {
      ...row, ...(change.url !== undefined ? { url: change.url } : {}), ...(change.keys !== undefined ? { keys: change.keys } : {}),
      ...(change.name !== undefined ? { name: change.name } : {}), ...(change.enabled !== undefined ? { enabled: change.enabled } : {}),
      ...(change.secret !== undefined ? { secret: change.secret } : {}),
    };
    if (!(await this.md.webhooks.update(next))) throw notFound('webhook', id);
    return next;
  }

  list(tenantId: string, format?: WebhookRow['format']): Promise<WebhookRow[]> { return this.md.webhooks.list(tenantId, format); }

  async get(tenantId: string, id: string, format?: WebhookRow['format']): Promise<WebhookRow> {
    const row = await this.md.webhooks.get(tenantId, id);
    if (!row || (format !== undefined && row.format !== format)) throw notFound('webhook', id);
    return row;
  }

  async delete(tenantId: string, id: string, format?: WebhookRow['format']): Promise<void> {
    await this.get(tenantId, id, format);
    if (!(await this.md.webhooks.delete(tenantId, id))) throw notFound('webhook', id);
  }

  async deliveries(tenantId: string, id: string, limit: number): Promise<Delivery[]> {
    await this.get(tenantId, id);
    return (await this.md.webhooks.deliveries(tenantId, id, limit)).map(wireDelivery);
  }

  /** A URL webhooks may be sent to: http(s), no credentials, a host the tenant's policy allows that resolves outside the refused ranges. */
  private async checkUrl(text: string, policy: NetworkPolicy | undefined): Promise<void> {
    let url: URL;
    try { url = new URL(text); } catch { throw invalid(`${JSON.stringify(text)} is not a URL`, 'pass an absolute http:// or https:// URL', { field: 'url' }); }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid(`webhook URLs are http or https, not ${url.protocol.replace(':', '')}`, 'pass an http:// or https:// URL', { field: 'url' });
    if (url.username || url.password) throw invalid('a webhook URL may not carry credentials', 'check the signature header instead of a password', { field: 'url' });
    const why = await this.egress.refusal(policy ?? this.defaultPolicy, url.hostname);
    if (why) throw invalid(`webhooks may not be sent to ${url.host}: ${why}`, 'use a public host the tenant\'s egress policy allows', { field: 'url', host: url.hostname });
  }
}

export function wireWebhook(w: WebhookRow): Webhook {
  return { id: w.id, url: w.url, events: kindsOf(w.keys), name: w.name, enabled: w.enabled, createdAt: w.createdAt };
}

export const wireCreated = (w: WebhookRow): WebhookCreated => ({ ...wireWebhook(w), secret: w.secret });

function wireDelivery(d: DeliveryRow): Delivery {
  return {
    id: String(d.id), eventId: String(d.eventId), ...(d.kind !== undefined ? { kind: d.kind } : {}), state: d.state, attempts: d.attempts,
    ...(d.lastStatus !== undefined ? { lastStatus: d.lastStatus } : {}), ...(d.lastError !== undefined ? { lastError: d.lastError } : {}),
    ...(d.state === 'pending' ? { nextAt: d.nextAt } : {}), createdAt: d.createdAt, updatedAt: d.updatedAt,
  };
}

import type { Logger } from 'pino';
import { inBackground } from '../util/background.js';
import type { NetworkPolicy } from '@shellbase/protocol';
import type { Egress } from '../net/egress.js';
import type { DeliveryOutcome, DueDelivery, MetadataStore, EventRow, WebhookRow } from '../store/metadata/types.js';
import { postThroughEgress, type PostOutcome } from './egress-post.js';
import { shellbaseSignature } from './sign.js';

/** A webhook format's body and headers for one event (besides `Shellbase-Signature`, added to every delivery). */
export type DeliveryFormat = (event: EventRow, webhook: WebhookRow, deliveryId: string) => { body: string; headers: Record<string, string> };

/** How long a delivery is retried after its event. */
export const RETRY_FOR_MS = 24 * 3_600_000;
/** The first retry's wait; each next one doubles, up to MAX_BACKOFF_MS. */
const FIRST_BACKOFF_MS = 1_000;
const MAX_BACKOFF_MS = 3_600_000;
/** How long a claimed delivery is this worker's before another may take it (longer than any attempt). */
const CLAIM_MS = 60_000;
/** Deliveries tried at once by one worker. */
const BATCH = 16;
/** How often a worker looks for due deliveries when it was not told of new ones; the least it waits between looks. */
const IDLE_POLL_MS = 1_000;
const MIN_WAIT_MS = 100;

/** The wait before attempt `n + 1` after `n` failed ones. */
export const backoffMs = (failed: number) => Math.min(FIRST_BACKOFF_MS * 2 ** Math.max(0, failed - 1), MAX_BACKOFF_MS);

/** The native format: the event as the stream sends it. */
export const shellbaseFormat: DeliveryFormat = (e, w, deliveryId) => ({
  body: JSON.stringify(wireEvent(e)),
  headers: { 'shellbase-webhook-id': w.id, 'shellbase-delivery-id': deliveryId, 'shellbase-event-id': String(e.id), 'shellbase-event-kind': e.kind },
});

/** An event as the API shows it. */
export function wireEvent(e: EventRow) {
  return { id: String(e.id), kind: e.kind, time: e.time, ...(e.context !== undefined ? { context: e.context } : {}), ...(e.machine !== undefined ? { machine: e.machine } : {}), data: e.data };
}

export interface DelivererOptions {
  metadata: MetadataStore;
  egress: Egress;
  /** The egress policy of a tenant without one of its own. */
  defaultPolicy: NetworkPolicy;
  formats: Map<WebhookRow['format'], DeliveryFormat>;
  log: Logger;
}

/**
 * Sends queued deliveries (queued in the store with their events): each through the egress
 * enforcement point under its tenant's policy, signed, and on failure (a refusal, no answer, a
 * status other than 2xx) retried with doubling waits until RETRY_FOR_MS after its event, then
 * marked failed. Any worker of a cluster may send any delivery; a claim keeps two from sending
 * one at once.
 */
export class Deliverer {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private closed = false;
  /** Ends attempts under way at shutdown (their claims run out and another pass sends them again). */
  private readonly abort = new AbortController();

  constructor(private readonly o: DelivererOptions) {}

  start(): void { this.schedule(0); }

  /** New deliveries may be due now. */
  kick(): void {
    if (this.running) { this.again = true; return; }
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = inBackground(() => this.pass()).finally(() => { this.running = null; inBackground(() => this.next()); });
    }, ms);
    this.timer.unref();
  }

  private next(): void {
    if (this.again) { this.again = false; this.schedule(0); return; }
    void this.o.metadata.webhooks.nextDue().then((at) => {
      const wait = at === null ? IDLE_POLL_MS : Math.max(MIN_WAIT_MS, Math.min(IDLE_POLL_MS, Date.parse(at) - Date.now()));
      this.schedule(wait);
    }, () => this.schedule(IDLE_POLL_MS));
  }

  private async pass(): Promise<void> {
    for (;;) {
      const now = Date.now();
      let due: DueDelivery[];
      try {
        // A read first: claiming is a write transaction, and most passes find nothing due.
        const at = await this.o.metadata.webhooks.nextDue();
        if (at === null || Date.parse(at) > now) return;
        due = await this.o.metadata.webhooks.claimDue(new Date(now).toISOString(), new Date(now + CLAIM_MS).toISOString(), BATCH);
      } catch (err) {
        this.o.log.warn({ err }, 'reading due webhook deliveries failed');
        return;
      }
      if (due.length === 0) return;
      await Promise.all(due.map((d) => this.attempt(d)));
      if (this.closed) return;
    }
  }

  private async attempt({ delivery, webhook, event }: DueDelivery): Promise<void> {
    const attempts = delivery.attempts + 1;
    const deliveryId = `${delivery.id}.${attempts}`;
    let outcome: PostOutcome;
    if (!webhook.enabled) {
      outcome = { error: 'the webhook is disabled' };
    } else {
      const format = this.o.formats.get(webhook.format) ?? shellbaseFormat;
      const { body, headers } = format(event, webhook, deliveryId);
      const at = new Date();
      outcome = await this.post(webhook, event, { ...headers, 'shellbase-signature': shellbaseSignature(webhook.secret, body, at) }, body)
        .catch((e: unknown) => ({ error: (e as Error).message }));
    }
    const now = Date.now();
    const ok = 'status' in outcome && outcome.status >= 200 && outcome.status < 300;
    const giveUp = !ok && now + backoffMs(attempts) > Date.parse(event.time) + RETRY_FOR_MS;
    const settled: DeliveryOutcome = {
      state: ok ? 'delivered' : giveUp ? 'failed' : 'pending', attempts, updatedAt: new Date(now).toISOString(),
      nextAt: new Date(ok || giveUp ? now : now + backoffMs(attempts)).toISOString(),
      ...('status' in outcome ? { lastStatus: outcome.status } : {}),
      ...('error' in outcome ? { lastError: outcome.error } : !ok ? { lastError: `the receiver answered ${outcome.status}` } : {}),
    };
    if (this.closed) return;
    await this.o.metadata.webhooks.settle(delivery.id, settled).catch((err: unknown) => this.o.log.warn({ err, delivery: delivery.id }, 'recording a webhook delivery failed'));
  }

  private async post(webhook: WebhookRow, event: EventRow, headers: Record<string, string>, body: string): Promise<PostOutcome> {
    const tenant = await this.o.metadata.tenants.get(webhook.tenantId);
    if (!tenant) return { error: 'the tenant is gone' };
    const policy = tenant.network ?? this.o.defaultPolicy;
    return postThroughEgress(this.o.egress, { tenantId: webhook.tenantId, context: event.context ?? '', kind: 'webhook', policy }, new URL(webhook.url), headers, body, this.abort.signal);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.abort.abort();
    if (this.timer) { clearTimeout(this.timer); this.timer = null; }
    await this.running;
  }
}

import type { DeliveryOutcome, DeliveryRow, DueDelivery, EventFilter, EventRow, NewEvent, WebhookRow } from '../rows.js';
import type { EventRepository, WebhookRepository } from '../types.js';
import { marks, type Param, type SqlDb } from './db.js';

interface EventRecord { id: number | string; tenant_id: string; kind: string; time: string; context: string | null; machine: string | null; data: string }
interface WebhookRecord { id: string; tenant_id: string; url: string; kinds: string; name: string; secret: string; enabled: number; format: string; created_at: string }
interface DeliveryRecord {
  id: number | string; webhook_id: string; tenant_id: string; event_id: number | string; state: string; attempts: number; next_at: string;
  last_status: number | null; last_error: string | null; created_at: string; updated_at: string;
}

const EVENT = 'id, tenant_id, kind, time, context, machine, data';
const WEBHOOK = 'id, tenant_id, url, kinds, name, secret, enabled, format, created_at';
const DELIVERY = 'id, webhook_id, tenant_id, event_id, state, attempts, next_at, last_status, last_error, created_at, updated_at';

const toEvent = (r: EventRecord): EventRow => ({
  id: Number(r.id), tenantId: r.tenant_id, kind: r.kind as EventRow['kind'], time: r.time, data: JSON.parse(r.data) as Record<string, unknown>,
  ...(r.context !== null ? { context: r.context } : {}), ...(r.machine !== null ? { machine: r.machine } : {}),
});

/** Match keys as stored: `,a,b,`, so one LIKE finds a webhook that takes an event. */
const kindsText = (kinds: readonly string[]) => `,${kinds.join(',')},`;

const toWebhook = (r: WebhookRecord): WebhookRow => ({
  id: r.id, tenantId: r.tenant_id, url: r.url, keys: r.kinds.split(',').filter(Boolean), name: r.name, secret: r.secret,
  enabled: Number(r.enabled) === 1, format: r.format as WebhookRow['format'], createdAt: r.created_at,
});

const toDelivery = (r: DeliveryRecord): DeliveryRow => ({
  id: Number(r.id), webhookId: r.webhook_id, tenantId: r.tenant_id, eventId: Number(r.event_id), state: r.state as DeliveryRow['state'],
  attempts: Number(r.attempts), nextAt: r.next_at, createdAt: r.created_at, updatedAt: r.updated_at,
  ...(r.last_status !== null ? { lastStatus: Number(r.last_status) } : {}), ...(r.last_error !== null ? { lastError: r.last_error } : {}),
});

/** `AND …` clauses of a filter, with their parameters. */
function filtered(filter: EventFilter | undefined): { sql: string; params: Param[] } {
  let sql = '';
  const params: Param[] = [];
  if (filter?.kinds?.length) { sql += ` AND kind IN (${marks(filter.kinds.length)})`; params.push(...filter.kinds); }
  if (filter?.context !== undefined) { sql += ' AND context = ?'; params.push(filter.context); }
  if (filter?.machine !== undefined) { sql += ' AND machine = ?'; params.push(filter.machine); }
  // A sandbox lifecycle event's data is written with its type first (compat/e2b/events.ts, LifecycleData).
  if (filter?.lifecycleTypes?.length) { sql += ` AND (${filter.lifecycleTypes.map(() => 'data LIKE ?').join(' OR ')})`; params.push(...filter.lifecycleTypes.map((t) => `{"type":${JSON.stringify(t)}%`)); }
  return { sql, params };
}

/** Events: one sequence over every tenant (ids from the database), each append queuing its webhooks' deliveries. */
export class SqlEvents implements EventRepository {
  constructor(private readonly db: SqlDb) {}

  append(events: readonly NewEvent[]): Promise<{ events: EventRow[]; deliveries: number }> {
    if (events.length === 0) return Promise.resolve({ events: [], deliveries: 0 });
    return this.db.tx(async (db) => {
      const out: EventRow[] = [];
      let deliveries = 0;
      for (const e of events) {
        const r = await db.get<{ id: number | string }>(`INSERT INTO events (tenant_id, kind, time, context, machine, data) VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
          [e.tenantId, e.kind, e.time, e.context ?? null, e.machine ?? null, JSON.stringify(e.data)]);
        const id = Number(r!.id);
        const key = e.kind === 'sandbox.lifecycle' ? `sandbox.lifecycle.${String(e.data.type)}` : e.kind;
        deliveries += await db.run(`INSERT INTO webhook_deliveries (webhook_id, tenant_id, event_id, state, attempts, next_at, created_at, updated_at)
          SELECT id, tenant_id, ?, 'pending', 0, ?, ?, ? FROM webhooks WHERE tenant_id = ? AND enabled = 1 AND kinds LIKE ?`,
        [id, e.time, e.time, e.time, e.tenantId, `%,${key},%`]);
        out.push({ ...e, id });
      }
      return { events: out, deliveries };
    });
  }

  async since(tenantId: string, afterId: number, limit: number, filter?: EventFilter): Promise<EventRow[]> {
    const f = filtered(filter);
    const rows = await this.db.all<EventRecord>(`SELECT ${EVENT} FROM events WHERE tenant_id = ? AND id > ?${f.sql} ORDER BY id LIMIT ?`, [tenantId, afterId, ...f.params, limit]);
    return rows.map(toEvent);
  }

  async page(tenantId: string, filter: EventFilter, offset: number, limit: number, ascending: boolean): Promise<EventRow[]> {
    const f = filtered(filter);
    const rows = await this.db.all<EventRecord>(`SELECT ${EVENT} FROM events WHERE tenant_id = ?${f.sql} ORDER BY id ${ascending ? 'ASC' : 'DESC'} LIMIT ? OFFSET ?`,
      [tenantId, ...f.params, limit, offset]);
    return rows.map(toEvent);
  }

  async recent(afterId: number, limit: number): Promise<EventRow[]> {
    const rows = await this.db.all<EventRecord>(`SELECT ${EVENT} FROM events WHERE id > ? ORDER BY id LIMIT ?`, [afterId, limit]);
    return rows.map(toEvent);
  }

  async late(throughId: number, sinceTime: string, limit: number): Promise<EventRow[]> {
    const rows = await this.db.all<EventRecord>(`SELECT ${EVENT} FROM events WHERE id <= ? AND time >= ? ORDER BY id LIMIT ?`, [throughId, sinceTime, limit]);
    return rows.map(toEvent);
  }

  async lastId(): Promise<number> {
    const r = await this.db.get<{ id: number | string | null }>('SELECT MAX(id) AS id FROM events');
    return Number(r?.id ?? 0);
  }

  async trim(before: string, limit: number): Promise<number> {
    // Settled deliveries of that age go first (their outcome is kept as long as the events are).
    await this.db.run(`DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries WHERE state <> 'pending' AND created_at < ? ORDER BY id LIMIT ?)`, [before, limit]);
    return this.db.run(`DELETE FROM events WHERE id IN (SELECT id FROM events WHERE time < ?
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = events.id AND d.state = 'pending') ORDER BY id LIMIT ?)`, [before, limit]);
  }
}

export class SqlWebhooks implements WebhookRepository {
  constructor(private readonly db: SqlDb) {}

  async create(w: WebhookRow): Promise<void> {
    await this.db.run(`INSERT INTO webhooks (${WEBHOOK}) VALUES (${marks(9)})`,
      [w.id, w.tenantId, w.url, kindsText(w.keys), w.name, w.secret, w.enabled ? 1 : 0, w.format, w.createdAt]);
  }

  async list(tenantId: string, format?: WebhookRow['format']): Promise<WebhookRow[]> {
    const rows = format === undefined
      ? await this.db.all<WebhookRecord>(`SELECT ${WEBHOOK} FROM webhooks WHERE tenant_id = ? ORDER BY created_at, id`, [tenantId])
      : await this.db.all<WebhookRecord>(`SELECT ${WEBHOOK} FROM webhooks WHERE tenant_id = ? AND format = ? ORDER BY created_at, id`, [tenantId, format]);
    return rows.map(toWebhook);
  }

  async get(tenantId: string, id: string): Promise<WebhookRow | null> {
    const r = await this.db.get<WebhookRecord>(`SELECT ${WEBHOOK} FROM webhooks WHERE tenant_id = ? AND id = ?`, [tenantId, id]);
    return r ? toWebhook(r) : null;
  }

  async update(w: WebhookRow): Promise<boolean> {
    return (await this.db.run('UPDATE webhooks SET url = ?, kinds = ?, name = ?, secret = ?, enabled = ? WHERE tenant_id = ? AND id = ?',
      [w.url, kindsText(w.keys), w.name, w.secret, w.enabled ? 1 : 0, w.tenantId, w.id])) > 0;
  }

  delete(tenantId: string, id: string): Promise<boolean> {
    return this.db.tx(async (db) => {
      await db.run('DELETE FROM webhook_deliveries WHERE tenant_id = ? AND webhook_id = ?', [tenantId, id]);
      return (await db.run('DELETE FROM webhooks WHERE tenant_id = ? AND id = ?', [tenantId, id])) > 0;
    });
  }

  claimDue(now: string, claimUntil: string, limit: number): Promise<DueDelivery[]> {
    return this.db.tx(async (db) => {
      const ds = await db.all<DeliveryRecord>(`SELECT ${DELIVERY} FROM webhook_deliveries WHERE state = 'pending' AND next_at <= ?
        AND (claimed_until IS NULL OR claimed_until <= ?) ORDER BY next_at, id LIMIT ?`, [now, now, limit]);
      const out: DueDelivery[] = [];
      for (const d of ds) {
        const w = await db.get<WebhookRecord>(`SELECT ${WEBHOOK} FROM webhooks WHERE id = ?`, [d.webhook_id]);
        const e = await db.get<EventRecord>(`SELECT ${EVENT} FROM events WHERE id = ?`, [d.event_id]);
        if (!w || !e) {
          // Its webhook or event is gone: nothing can be sent.
          await db.run(`UPDATE webhook_deliveries SET state = 'failed', last_error = ?, updated_at = ?, claimed_until = NULL WHERE id = ?`,
            [w ? 'the event is no longer kept' : 'the webhook was deleted', now, d.id]);
          continue;
        }
        await db.run('UPDATE webhook_deliveries SET claimed_until = ? WHERE id = ?', [claimUntil, d.id]);
        out.push({ delivery: toDelivery(d), webhook: toWebhook(w), event: toEvent(e) });
      }
      return out;
    });
  }

  async settle(id: number, o: DeliveryOutcome): Promise<void> {
    await this.db.run(`UPDATE webhook_deliveries SET state = ?, attempts = ?, next_at = ?, last_status = ?, last_error = ?, updated_at = ?, claimed_until = NULL WHERE id = ?`,
      [o.state, o.attempts, o.nextAt, o.lastStatus ?? null, o.lastError ?? null, o.updatedAt, id]);
  }

  async deliveries(tenantId: string, webhookId: string, limit: number): Promise<DeliveryRow[]> {
    const rows = await this.db.all<DeliveryRecord & { kind: string | null }>(`SELECT ${DELIVERY.split(', ').map((c) => `d.${c}`).join(', ')}, e.kind
      FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id WHERE d.tenant_id = ? AND d.webhook_id = ? ORDER BY d.id DESC LIMIT ?`, [tenantId, webhookId, limit]);
    return rows.map((r) => ({ ...toDelivery(r), ...(r.kind !== null ? { kind: r.kind as EventRow['kind'] } : {}) }));
  }

  async nextDue(): Promise<string | null> {
    // A claimed delivery is due again only when its claim runs out.
    const r = await this.db.get<{ at: string | null }>(`SELECT MIN(CASE WHEN claimed_until IS NOT NULL AND claimed_until > next_at THEN claimed_until ELSE next_at END) AS at
      FROM webhook_deliveries WHERE state = 'pending'`);
    return r?.at ?? null;
  }
}

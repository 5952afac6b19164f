import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Caller } from '../../core/deps.js';
import { ShellbaseError, invalid } from '../../errors.js';
import { LIFECYCLE_TYPES, e2bSignature, type DeliveryFormat, type EventRow, type WebhookRow } from '../../events/index.js';
import type { Operations } from '../../ops/dispatch.js';
import { apiAuthorization, optionalBoolean, readJson, sendError, sendJson } from './http.js';

/** E2B's name of each lifecycle type in `eventLabel`. */
const LABELS: Record<string, string> = { created: 'create', paused: 'pause', resumed: 'resume', updated: 'update', killed: 'kill', checkpointed: 'checkpoint' };
const E2B_TYPES = LIFECYCLE_TYPES.map((t) => `sandbox.lifecycle.${t}`);

/** What compat/e2b stores as a `sandbox.lifecycle` event's data (`type` first: the store filters on it). */
export interface LifecycleData {
  type: (typeof LIFECYCLE_TYPES)[number];
  templateId: string;
  metadata: Record<string, string>;
  /** E2B's `eventData` beyond the metadata (`set_timeout` on update, `execution` on pause and kill). */
  extra?: Record<string, unknown>;
}

/** What a lifecycle event is told of its sandbox. */
interface Reported {
  row: { id: string; spec: { cpus: number; memoryMb: number; context?: string } };
  e2b: { templateId: string; metadata: Record<string, string>; startedAt: string };
}

/**
 * Reports a sandbox's move as a `sandbox.lifecycle` event of the caller's (pause and kill carry
 * E2B's `execution`: when it started, its vCPUs and memory, how long it ran).
 */
export function reportLifecycle(ops: Operations, caller: Caller, s: Reported, type: LifecycleData['type'], extra: Record<string, unknown> = {}): Promise<void> {
  const execution = type === 'paused' || type === 'killed'
    ? { execution: { started_at: s.e2b.startedAt, vcpu_count: s.row.spec.cpus, memory_mb: s.row.spec.memoryMb, execution_time: Math.max(0, Date.now() - Date.parse(s.e2b.startedAt)) } }
    : {};
  const data: LifecycleData = { type, templateId: s.e2b.templateId, metadata: s.e2b.metadata, extra: { ...execution, ...extra } };
  return ops.run(caller, 'event.emit', { event: { kind: 'sandbox.lifecycle', machine: s.row.id, data: data as unknown as Record<string, unknown> } });
}

/** A lifecycle event in E2B's shape (its events API and its webhooks' payload). */
export function e2bEvent(e: EventRow) {
  const d = e.data as unknown as LifecycleData;
  return {
    version: 'v2', id: String(e.id), type: `sandbox.lifecycle.${d.type}`, eventCategory: 'lifecycle', eventLabel: LABELS[d.type] ?? d.type,
    eventData: { sandbox_metadata: d.metadata ?? {}, ...(d.extra ?? {}) }, sandboxBuildId: '', sandboxExecutionId: e.machine ?? '',
    sandboxId: e.machine ?? '', sandboxTeamId: e.tenantId, sandboxTemplateId: d.templateId ?? '', timestamp: e.time,
  };
}

/** E2B's webhook deliveries: the event in its shape, `e2b-signature` over the body (besides shellbase's own signature). */
export const e2bWebhookFormat: DeliveryFormat = (e, w, deliveryId) => {
  const body = JSON.stringify(e2bEvent(e));
  return { body, headers: { 'e2b-webhook-id': w.id, 'e2b-delivery-id': deliveryId, 'e2b-signature-version': 'v1', 'e2b-signature': e2bSignature(w.secret, body) } };
};

const shown = (w: WebhookRow) => ({ id: w.id, teamID: w.tenantId, name: w.name, createdAt: w.createdAt, enabled: w.enabled, url: w.url, events: w.keys });

function lifecycleTypes(v: unknown, field: string): string[] {
  if (!Array.isArray(v) || v.some((t) => typeof t !== 'string')) throw invalid(`${field} must be a list of event types`, `types are: ${E2B_TYPES.join(', ')}`);
  const bad = (v as string[]).find((t) => !E2B_TYPES.includes(t));
  if (bad !== undefined) throw invalid(`unknown event type ${JSON.stringify(bad)}`, `types are: ${E2B_TYPES.join(', ')}`);
  return [...new Set(v as string[])];
}

function optionalString(v: unknown, field: string, max: number): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || v.length > max) throw invalid(`${field} must be a string of at most ${max} characters`);
  return v;
}

function int(v: string | null, field: string, min: number, max: number, fallback: number): number {
  if (v === null || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw invalid(`${field} must be a whole number from ${min} to ${max}`);
  return n;
}

/** Whether a path is E2B's lifecycle events API. */
export const isEventsPath = (path: string) => /^\/events\/(sandboxes|webhooks)(\/|$)/.test(path);

/**
 * E2B's lifecycle events API over shellbase's events: `GET /events/sandboxes[/{id}]` (offset,
 * limit, orderAsc, types) and webhooks at `/events/webhooks[/{id}]` (registered, listed, updated,
 * deleted in E2B's shapes; delivered in E2B's payload with `e2b-signature`).
 */
export class E2bEvents {
  constructor(private readonly ops: Operations) {}

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let caller: Caller | null = null;
    try {
      const url = new URL(req.url ?? '/', 'http://e2b');
      caller = await this.ops.begin(apiAuthorization(req));
      const path = url.pathname;
      const sandbox = /^\/events\/sandboxes(?:\/([^/]+))?$/.exec(path);
      const hook = /^\/events\/webhooks(?:\/([^/]+))?$/.exec(path);
      if (sandbox && req.method === 'GET') await this.list(caller, res, url, sandbox[1] === undefined ? undefined : decodeURIComponent(sandbox[1]));
      else if (hook) await this.webhooks(caller, req, res, hook[1] === undefined ? undefined : decodeURIComponent(hook[1]));
      else throw new ShellbaseError('not_found', `no route ${req.method} ${path}`);
    } catch (e) {
      sendError(res, e);
    } finally {
      const c = caller;
      if (c) res.once('close', () => c.hold.release());
    }
  }

  private async list(caller: Caller, res: ServerResponse, url: URL, sandbox: string | undefined): Promise<void> {
    const q = url.searchParams;
    const types = q.getAll('types').flatMap((t) => t.split(',')).filter(Boolean);
    const filter = {
      kinds: ['sandbox.lifecycle' as const], ...(sandbox !== undefined ? { machine: sandbox } : {}),
      ...(types.length ? { lifecycleTypes: lifecycleTypes(types, 'types').map((t) => t.slice('sandbox.lifecycle.'.length)) } : {}),
    };
    const ascending = q.get('orderAsc') === 'true';
    const rows = await this.ops.run(caller, 'event.page', { filter, offset: int(q.get('offset'), 'offset', 0, 1_000_000, 0), limit: int(q.get('limit'), 'limit', 1, 100, 10), ascending });
    sendJson(res, 200, rows.map(e2bEvent));
  }

  private async webhooks(caller: Caller, req: IncomingMessage, res: ServerResponse, id: string | undefined): Promise<void> {
    if (id === undefined && req.method === 'POST') {
      const b = await readJson(req);
      if (typeof b.url !== 'string' || !b.url) throw invalid('url is required', 'pass the URL events are POSTed to');
      const name = optionalString(b.name, 'name', 128);
      const secret = optionalString(b.signatureSecret, 'signatureSecret', 256);
      if (!secret) throw invalid('signatureSecret is required', 'pass the secret deliveries are signed with (e2b-signature)');
      const enabled = optionalBoolean(b.enabled, 'enabled');
      const w = await this.ops.run(caller, 'webhook.e2bCreate', {
        spec: { url: b.url, keys: lifecycleTypes(b.events, 'events'), secret, ...(name !== undefined ? { name } : {}), ...(enabled !== undefined ? { enabled } : {}) },
      });
      sendJson(res, 201, shown(w));
    } else if (id === undefined && req.method === 'GET') {
      sendJson(res, 200, (await this.ops.run(caller, 'webhook.e2bList', {})).map(shown));
    } else if (id !== undefined && req.method === 'GET') {
      sendJson(res, 200, shown(await this.ops.run(caller, 'webhook.e2bGet', { id })));
    } else if (id !== undefined && req.method === 'PATCH') {
      const b = await readJson(req);
      const url = optionalString(b.url, 'url', 2048);
      const name = optionalString(b.name, 'name', 128);
      const secret = optionalString(b.signatureSecret, 'signatureSecret', 256);
      if (secret === '') throw invalid('signatureSecret may not be empty', 'pass the secret deliveries are signed with, or leave it out to keep the one set');
      const enabled = optionalBoolean(b.enabled, 'enabled');
      const change = {
        ...(url !== undefined ? { url } : {}), ...(name !== undefined ? { name } : {}), ...(secret !== undefined ? { secret } : {}),
        ...(enabled !== undefined ? { enabled } : {}), ...(b.events !== undefined ? { keys: lifecycleTypes(b.events, 'events') } : {}),
      };
      sendJson(res, 200, shown(await this.ops.run(caller, 'webhook.e2bUpdate', { id, change })));
    } else if (id !== undefined && req.method === 'DELETE') {
      await this.ops.run(caller, 'webhook.e2bDelete', { id });
      sendJson(res, 200, {});
    } else {
      throw new ShellbaseError('not_found', `no route ${req.method} ${req.url ?? ''}`);
    }
  }
}

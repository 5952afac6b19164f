import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import {
  DeliveriesQuerySchema as DeliveriesQuery, DeliverySchema as Delivery, EventSchema as Event, EventsQuerySchema as EventsQuery,
  WebhookCreatedSchema as WebhookCreated, WebhookInSchema as WebhookIn, WebhookParamsSchema as WebhookParams, WebhookSchema as Webhook,
} from '@shellbase/protocol/schemas';
import type { Operations } from '../../ops/dispatch.js';
import { errorResponses } from '../schemas.js';
import { ShellbaseError } from '../../errors.js';
import { eventId, kindsFilter } from '../../events/index.js';

/** A comment line every this many ms of silence keeps proxies and clients from taking the stream for dead. */
const SSE_KEEPALIVE_MS = 15_000;
const LIST_LIMIT = 1000;
/** Streams a tenant may have open on one server at once. */
export const MAX_STREAMS = 32;
/** Bytes a stream may have waiting for a client that does not read; past them it is ended (the client resumes with Last-Event-ID). */
const MAX_BUFFERED = 4 << 20;

/**
 * The tenant's events: `GET /v1/events` as a Server-Sent Events stream (`Accept:
 * text/event-stream`; `Last-Event-ID` or `after` resumes after an event still kept) or, otherwise,
 * a page of the kept ones as JSON; and its webhooks with their deliveries.
 */
export function eventRoutes(app: FastifyInstance, ops: Operations): void {
  // Open streams end before the server closes (a stream never ends by itself).
  const open = new Set<() => void>();
  const perTenant = new Map<string, number>();
  app.addHook('preClose', async () => { for (const end of [...open]) end(); });

  app.get<{ Querystring: Static<typeof EventsQuery> }>('/v1/events', {
    config: { op: 'event.stream' },
    schema: { tags: ['events'], querystring: EventsQuery, response: { 200: Type.Object({ events: Type.Array(Event) }), ...errorResponses } },
  }, async (req, reply) => {
    const filter = {
      ...(req.query.kinds !== undefined ? { kinds: kindsFilter(req.query.kinds) } : {}),
      ...(req.query.context !== undefined ? { context: req.query.context } : {}),
      ...(req.query.machine !== undefined ? { machine: req.query.machine } : {}),
    };
    const header = req.headers['last-event-id'];
    const after = eventId(typeof header === 'string' && header !== '' ? header : req.query.after);
    if (!(req.headers.accept ?? '').includes('text/event-stream')) {
      return { events: await ops.run(req.caller, 'event.list', { filter, after, limit: LIST_LIMIT }) };
    }
    const tenant = req.caller.tenantId;
    const streams = perTenant.get(tenant) ?? 0;
    if (streams >= MAX_STREAMS) {
      throw new ShellbaseError('limit_exceeded', `a tenant has at most ${MAX_STREAMS} event streams open at once on a server`, { hint: 'close one, or filter one stream by kind instead of opening several' });
    }
    perTenant.set(tenant, streams + 1);
    const res = reply.raw;
    let last = Date.now();
    let stop: (() => void) | null = null;
    let ended = false;
    let timer: NodeJS.Timeout | undefined;
    const end = () => {
      if (ended) return;
      ended = true;
      clearInterval(timer);
      stop?.();
      open.delete(end);
      const left = (perTenant.get(tenant) ?? 1) - 1;
      if (left > 0) perTenant.set(tenant, left); else perTenant.delete(tenant);
      if (!res.writableEnded) res.end();
    };
    const write = (text: string) => {
      if (ended || res.destroyed) return;
      last = Date.now();
      res.write(text);
      if (res.writableLength > MAX_BUFFERED) end();
    };
    reply.hijack();
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    write(': shellbase events\n\n');
    timer = setInterval(() => { if (Date.now() - last >= SSE_KEEPALIVE_MS) write(': keep-alive\n\n'); }, SSE_KEEPALIVE_MS / 3);
    timer.unref();
    open.add(end);
    res.once('close', end);
    try {
      const s = await ops.run(req.caller, 'event.stream', {
        filter, after, send: (e) => write(`id: ${e.id}\nevent: ${e.kind}\ndata: ${JSON.stringify(e)}\n\n`),
      });
      if (ended) s(); else stop = s;
    } catch (err) {
      write(`event: error\ndata: ${JSON.stringify({ message: (err as Error).message })}\n\n`);
      end();
    }
    return reply;
  });

  app.post<{ Body: Static<typeof WebhookIn> }>('/v1/webhooks', {
    config: { op: 'webhook.create' }, schema: { tags: ['events'], body: WebhookIn, response: { 201: WebhookCreated, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await ops.run(req.caller, 'webhook.create', { body: req.body })));

  app.get('/v1/webhooks', {
    config: { op: 'webhook.list' }, schema: { tags: ['events'], response: { 200: Type.Object({ webhooks: Type.Array(Webhook) }), ...errorResponses } },
  }, async (req) => ({ webhooks: await ops.run(req.caller, 'webhook.list', {}) }));

  app.get<{ Params: Static<typeof WebhookParams> }>('/v1/webhooks/:id', {
    config: { op: 'webhook.get' }, schema: { tags: ['events'], params: WebhookParams, response: { 200: Webhook, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'webhook.get', { id: req.params.id }));

  app.delete<{ Params: Static<typeof WebhookParams> }>('/v1/webhooks/:id', {
    config: { op: 'webhook.delete' }, schema: { tags: ['events'], params: WebhookParams, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => {
    await ops.run(req.caller, 'webhook.delete', { id: req.params.id });
    return reply.status(204).send();
  });

  app.get<{ Params: Static<typeof WebhookParams>; Querystring: Static<typeof DeliveriesQuery> }>('/v1/webhooks/:id/deliveries', {
    config: { op: 'webhook.deliveries' },
    schema: { tags: ['events'], params: WebhookParams, querystring: DeliveriesQuery, response: { 200: Type.Object({ deliveries: Type.Array(Delivery) }), ...errorResponses } },
  }, async (req) => ({ deliveries: await ops.run(req.caller, 'webhook.deliveries', { id: req.params.id, limit: req.query.limit ?? 100 }) }));
}

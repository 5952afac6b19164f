import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import {
  DeliveriesQuerySchema as DeliveriesQuery, DeliverySchema as Delivery, EventSchema as Event, EventsQuerySchema as EventsQuery,
  WebhookCreatedSchema as WebhookCreated, WebhookInSchema as WebhookIn, WebhookParamsSchema as WebhookParams, WebhookSchema as Webhook,
} from '@shellbase/protocol/schemas';
import type { Operations } from '../../ops/dispatch.js';
import { errorResponses } from '../schemas.js';
import { eventId, kindsFilter } from '../../events/index.js';

/** A comment line every this many ms of silence keeps proxies and clients from taking the stream for dead. */
const SSE_KEEPALIVE_MS = 15_000;
const LIST_LIMIT = 1000;

/**
 * The tenant's events: `GET /v1/events` as a Server-Sent Events stream (`Accept:
 * text/event-stream`; `Last-Event-ID` or `after` resumes after an event still kept) or, otherwise,
 * a page of the kept ones as JSON; and its webhooks with their deliveries.
 */
export function eventRoutes(app: FastifyInstance, ops: Operations): void {
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
    const res = reply.raw;
    let last = Date.now();
    const write = (text: string) => { last = Date.now(); if (!res.destroyed) res.write(text); };
    reply.hijack();
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    write(': shellbase events\n\n');
    let stop: (() => void) | null = null;
    const timer = setInterval(() => { if (Date.now() - last >= SSE_KEEPALIVE_MS) write(': keep-alive\n\n'); }, SSE_KEEPALIVE_MS / 3);
    timer.unref();
    const end = () => { clearInterval(timer); stop?.(); stop = null; };
    res.once('close', end);
    try {
      stop = await ops.run(req.caller, 'event.stream', {
        filter, after, send: (e) => write(`id: ${e.id}\nevent: ${e.kind}\ndata: ${JSON.stringify(e)}\n\n`),
      });
      if (res.destroyed) end();
    } catch (err) {
      write(`event: error\ndata: ${JSON.stringify({ message: (err as Error).message })}\n\n`);
      end();
      res.end();
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

import { Type } from 'typebox';
import { EVENT_KINDS } from '../constants.js';
import { oneOf, strict } from './common.js';

/** Events (`GET /v1/events`, a Server-Sent Events stream) and webhooks (`/v1/webhooks`). */

export const EventKindSchema = oneOf(EVENT_KINDS, { title: 'EventKind', description: 'What happened: a head moved, a service woke, slept or failed, a machine changed state, a quota refused work, an E2B sandbox moved along its lifecycle.' });

export const EventSchema = Type.Object({
  /** Increasing over a server's (or a cluster's) events: the SSE `id`, what `Last-Event-ID` resumes after. */
  id: Type.String(),
  kind: EventKindSchema,
  time: Type.String(),
  /** The context it concerns (a commit, a service, a refused query), if any. */
  context: Type.Optional(Type.String()),
  /** The machine (or E2B sandbox) it concerns, if any. */
  machine: Type.Optional(Type.String()),
  /**
   * By kind: `version.committed` {version, parent, cause}; `service.*` {service, reason?};
   * `machine.state` {state, from}; `quota.refused` {quota, limit, operation}; `sandbox.lifecycle`
   * {type: created | paused | resumed | updated | killed, templateId, metadata, …}.
   */
  data: Type.Record(Type.String(), Type.Unknown()),
}, { title: 'Event', description: 'One thing that happened in a tenant.' });

export const EventsQuerySchema = Type.Object({
  /** Kinds to pass (comma-separated or repeated); all when absent. */
  kinds: Type.Optional(Type.Union([Type.String({ maxLength: 512 }), Type.Array(Type.String({ maxLength: 64 }), { maxItems: 16 })])),
  context: Type.Optional(Type.String({ maxLength: 128 })),
  machine: Type.Optional(Type.String({ maxLength: 128 })),
  /** Resume after this event id (as the `Last-Event-ID` header does; the header wins). */
  after: Type.Optional(Type.String({ maxLength: 32 })),
}, strict);

export const WebhookInSchema = Type.Object({
  /** Where deliveries are POSTed: http or https, a host the tenant's egress policy allows and that is not private or this host. */
  url: Type.String({ minLength: 1, maxLength: 2048 }),
  /** The kinds delivered (at least one). */
  events: Type.Array(EventKindSchema, { minItems: 1, maxItems: 16 }),
  name: Type.Optional(Type.String({ maxLength: 128 })),
}, { ...strict, title: 'WebhookIn' });

export const WebhookSchema = Type.Object({
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(EventKindSchema),
  name: Type.String(),
  enabled: Type.Boolean(),
  createdAt: Type.String(),
}, { title: 'Webhook', description: 'A URL a tenant registered to be sent its events.' });

export const WebhookCreatedSchema = Type.Intersect([WebhookSchema, Type.Object({
  /** The signing secret, shown once: deliveries carry `Shellbase-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. */
  secret: Type.String(),
})], { title: 'WebhookCreated' });

export const DeliveryStateSchema = Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('failed')], { title: 'DeliveryState' });

export const DeliverySchema = Type.Object({
  id: Type.String(),
  eventId: Type.String(),
  /** The event's kind (absent once the event is no longer kept). */
  kind: Type.Optional(EventKindSchema),
  state: DeliveryStateSchema,
  attempts: Type.Integer(),
  /** The receiver's last HTTP status, if it answered. */
  lastStatus: Type.Optional(Type.Integer()),
  /** Why the last attempt failed (a refusal by the egress rules, a connection error, a status). */
  lastError: Type.Optional(Type.String()),
  /** When a pending delivery is tried next. */
  nextAt: Type.Optional(Type.String()),
  createdAt: Type.String(),
  updatedAt: Type.String(),
}, { title: 'Delivery', description: 'One event on its way to one webhook, and how it went.' });

export const WebhookParamsSchema = Type.Object({ id: Type.String({ maxLength: 64 }) }, strict);
export const DeliveriesQuerySchema = Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })) }, strict);

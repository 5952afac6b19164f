import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Peers } from '../../core/peers.js';
import { Type, type Static } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { ShellbaseError } from '../../errors.js';
import { TUNNEL_PROTOCOL } from '../tunnel.js';
import { forwardRequest } from '../forward.js';
import { SERVICE_ACCESS, SERVICE_STATES, TIMEOUT_CEILING_MS } from '@shellbase/protocol';
import { Name, NetworkPolicy, NetworkPolicyIn, errorResponses, oneOf } from '../schemas.js';

const strict = { additionalProperties: false } as const;
/** Who else reaches a service by name: "tenant", or a list of contexts (engine/services/links.ts checks the names). */
const Share = Type.Union([Type.Literal('tenant'), Type.Array(Type.String(), { maxItems: 256 })]);
// Null first: with coerceTypes "array", a later array branch would turn null into [""].
const ShareBody = Type.Object({ share: Type.Union([Type.Null(), Share]) }, strict);
export const Service = Type.Object({
  name: Type.String(), context: Type.String(), command: Type.Union([Type.String(), Type.Array(Type.String())]),
  port: Type.Integer(), url: Type.String(), pathUrl: Type.String(),
  state: oneOf(SERVICE_STATES),
  idleTimeoutMs: Type.Integer(), access: oneOf(SERVICE_ACCESS), network: Type.Optional(NetworkPolicy), share: Type.Optional(Share), createdAt: Type.String(),
}, { $id: 'Service' });
export const CreateServiceBody = Type.Object({
  name: Name,
  command: Type.Union([Type.String({ minLength: 1, maxLength: 1 << 16 }), Type.Array(Type.String(), { minItems: 1, maxItems: 4096 })]),
  port: Type.Integer(),
  env: Type.Optional(Type.Record(Type.String(), Type.String())),
  idleTimeoutMs: Type.Optional(Type.Integer()),
  startTimeoutMs: Type.Optional(Type.Integer({ maximum: TIMEOUT_CEILING_MS })),
  limits: Type.Optional(Type.Object({
    memoryMb: Type.Optional(Type.Number()), pids: Type.Optional(Type.Number()), cpus: Type.Optional(Type.Number()), diskMb: Type.Optional(Type.Number()),
  }, strict)),
  access: Type.Optional(oneOf(SERVICE_ACCESS)),
  network: Type.Optional(NetworkPolicyIn),
  share: Type.Optional(Share),
}, strict);
const Params = Type.Object({ name: Type.String({ maxLength: 1024 }) });
const SvcParams = Type.Object({ name: Type.String({ maxLength: 1024 }), svc: Type.String({ maxLength: 1024 }) });
const LogsQuery = Type.Object({ tail: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })) }, strict);

/**
 * Services of a context: define (nothing runs), list, get, stop (sleep now), delete, logs. In a
 * cluster, stop, delete and logs of a service that another worker runs are passed to that worker
 * (with the caller's key, checked there again).
 */
export function serviceRoutes(app: FastifyInstance, engine: Engine, peers?: Peers): void {
  /** True when the request went to the worker running the service (the reply is its answer). */
  const passedOn = async (req: FastifyRequest<{ Params: Static<typeof SvcParams> }>, reply: FastifyReply): Promise<boolean> => {
    if (!peers || req.forwarded) return false;
    const there = await engine.services.elsewhere(req.caller, req.params.name, req.params.svc);
    if (!there) return false;
    void reply.hijack();
    forwardRequest(there.api, req.raw, reply.raw, (err) => {
      const e = err instanceof ShellbaseError ? err : new ShellbaseError('internal', 'internal error');
      if (reply.raw.headersSent) reply.raw.destroy();
      else reply.raw.writeHead(e.status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify({ error: e.toBody() }));
    }, peers, Buffer.alloc(0));
    return true;
  };

  app.get<{ Params: Static<typeof SvcParams> }>('/v1/contexts/:name/services/:svc/connect', {
    schema: {
      tags: ['services', 'network'], params: SvcParams, response: errorResponses,
      description: `A TCP tunnel to the service: send this with \`Connection: Upgrade\` and \`Upgrade: ${TUNNEL_PROTOCOL}\`; after \`101 Switching Protocols\` the connection carries the service port's bytes (the service wakes first).`,
    },
  }, async (req) => {
    await engine.services.get(req.caller, req.params.name, req.params.svc);
    throw new ShellbaseError('invalid_argument', 'this path is a TCP tunnel', { hint: `send Connection: Upgrade and Upgrade: ${TUNNEL_PROTOCOL} (the CLI's \`shellbase connect\` and the SDK's services.connect do)` });
  });

  app.addSchema(Service);
  const base = '/v1/contexts/:name/services';
  app.post<{ Params: Static<typeof Params>; Body: Static<typeof CreateServiceBody> }>(base, {
    schema: { tags: ['services'], params: Params, body: CreateServiceBody, response: { 201: Service, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await engine.services.create(req.caller, req.params.name, req.body)));

  app.get<{ Params: Static<typeof Params> }>(base, {
    schema: { tags: ['services'], params: Params, response: { 200: Type.Object({ services: Type.Array(Service) }), ...errorResponses } },
  }, async (req) => ({ services: await engine.services.list(req.caller, req.params.name) }));

  app.get<{ Params: Static<typeof SvcParams> }>(`${base}/:svc`, {
    schema: { tags: ['services'], params: SvcParams, response: { 200: Service, ...errorResponses } },
  }, async (req) => engine.services.get(req.caller, req.params.name, req.params.svc));

  app.post<{ Params: Static<typeof SvcParams> }>(`${base}/:svc/stop`, {
    schema: { tags: ['services'], params: SvcParams, response: { 200: Service, ...errorResponses } },
  }, async (req, reply) => ((await passedOn(req, reply)) ? reply : engine.services.stop(req.caller, req.params.name, req.params.svc)));

  app.put<{ Params: Static<typeof SvcParams>; Body: Static<typeof ShareBody> }>(`${base}/:svc/share`, {
    schema: { tags: ['services'], params: SvcParams, body: ShareBody, response: { 200: Service, ...errorResponses } },
  }, async (req) => engine.services.share(req.caller, req.params.name, req.params.svc, req.body.share));

  app.delete<{ Params: Static<typeof SvcParams> }>(`${base}/:svc`, {
    schema: { tags: ['services'], params: SvcParams, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => {
    if (await passedOn(req, reply)) return reply;
    await engine.services.remove(req.caller, req.params.name, req.params.svc);
    return reply.status(204).send();
  });

  app.get<{ Params: Static<typeof SvcParams>; Querystring: Static<typeof LogsQuery> }>(`${base}/:svc/logs`, {
    schema: { tags: ['services'], params: SvcParams, querystring: LogsQuery },
  }, async (req, reply) => {
    if (await passedOn(req, reply)) return reply;
    return reply.type('text/plain; charset=utf-8').send(await engine.services.logs(req.caller, req.params.name, req.params.svc, req.query.tail));
  });
}

import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { ShellbaseError } from '../../errors.js';
import { TUNNEL_PROTOCOL } from '../tunnel.js';
import { CreateServiceRequestSchema as CreateServiceBody, NameParamsSchema as Params, ServiceLogsQuerySchema as LogsQuery, ServiceParamsSchema as SvcParams, ServiceSchema as Service, ShareBodySchema as ShareBody } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

/**
 * Services of a context: define (nothing runs), list, get, stop (sleep now), delete, logs. In a
 * cluster, stop, delete and logs of a service that another worker runs are served by that worker
 * (their operations' place: api/routing.ts).
 */
export function serviceRoutes(app: FastifyInstance, ops: Operations): void {
  app.get<{ Params: Static<typeof SvcParams> }>('/v1/contexts/:name/services/:svc/connect', {
    config: { op: 'service.get' }, schema: {
      tags: ['services', 'network'], params: SvcParams, response: errorResponses,
      description: `A TCP tunnel to the service: send this with \`Connection: Upgrade\` and \`Upgrade: ${TUNNEL_PROTOCOL}\`; after \`101 Switching Protocols\` the connection carries the service port's bytes (the service wakes first).`,
    },
  }, async (req) => {
    await ops.run(req.caller, 'service.get', { context: req.params.name, service: req.params.svc });
    throw new ShellbaseError('invalid_argument', 'this path is a TCP tunnel', { hint: `send Connection: Upgrade and Upgrade: ${TUNNEL_PROTOCOL} (the CLI's \`shellbase connect\` and the SDK's services.connect do)` });
  });

  app.addSchema(Service);
  const base = '/v1/contexts/:name/services';
  app.post<{ Params: Static<typeof Params>; Body: Static<typeof CreateServiceBody> }>(base, {
    config: { op: 'service.create' }, schema: { tags: ['services'], params: Params, body: CreateServiceBody, response: { 201: Service, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await ops.run(req.caller, 'service.create', { context: req.params.name, req: req.body })));

  app.get<{ Params: Static<typeof Params> }>(base, {
    config: { op: 'service.list' }, schema: { tags: ['services'], params: Params, response: { 200: Type.Object({ services: Type.Array(Service) }), ...errorResponses } },
  }, async (req) => ({ services: await ops.run(req.caller, 'service.list', { context: req.params.name }) }));

  app.get<{ Params: Static<typeof SvcParams> }>(`${base}/:svc`, {
    config: { op: 'service.get' }, schema: { tags: ['services'], params: SvcParams, response: { 200: Service, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'service.get', { context: req.params.name, service: req.params.svc }));

  app.post<{ Params: Static<typeof SvcParams> }>(`${base}/:svc/stop`, {
    config: { op: 'service.stop' }, schema: { tags: ['services'], params: SvcParams, response: { 200: Service, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'service.stop', { context: req.params.name, service: req.params.svc }));

  app.put<{ Params: Static<typeof SvcParams>; Body: Static<typeof ShareBody> }>(`${base}/:svc/share`, {
    config: { op: 'service.share' }, schema: { tags: ['services'], params: SvcParams, body: ShareBody, response: { 200: Service, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'service.share', { context: req.params.name, service: req.params.svc, share: req.body.share }));

  app.delete<{ Params: Static<typeof SvcParams> }>(`${base}/:svc`, {
    config: { op: 'service.remove' }, schema: { tags: ['services'], params: SvcParams, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => {
    await ops.run(req.caller, 'service.remove', { context: req.params.name, service: req.params.svc });
    return reply.status(204).send();
  });

  app.get<{ Params: Static<typeof SvcParams>; Querystring: Static<typeof LogsQuery> }>(`${base}/:svc/logs`, {
    config: { op: 'service.logs' }, schema: { tags: ['services'], params: SvcParams, querystring: LogsQuery },
  }, async (req, reply) => {
    return reply.type('text/plain; charset=utf-8').send(await ops.run(req.caller, 'service.logs', { context: req.params.name, service: req.params.svc, tail: req.query.tail }));
  });
}

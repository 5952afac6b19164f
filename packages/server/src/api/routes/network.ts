import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { ContextNetworkSchema as ContextNetwork, NameParamsSchema as NameParams, NetworkConnectionSchema as Connection, NetworkLogQuerySchema as LogQuery, NetworkPolicyInSchema as NetworkPolicyIn } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

const denied = { 403: errorResponses[401], ...errorResponses };

/** A context's egress policy (kept with it, inherited by forks) and its audit log. */
export function networkRoutes(app: FastifyInstance, ops: Operations): void {
  const base = '/v1/contexts/:name/network';
  app.get<{ Params: Static<typeof NameParams> }>(base, {
    config: { op: 'network.get' }, schema: { tags: ['network'], params: NameParams, response: { 200: ContextNetwork, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'network.get', { context: req.params.name }));

  app.put<{ Params: Static<typeof NameParams>; Body: Static<typeof NetworkPolicyIn> }>(base, {
    config: { op: 'network.set' }, schema: { tags: ['network'], params: NameParams, body: NetworkPolicyIn, response: { 200: ContextNetwork, ...denied } },
  }, async (req) => ops.run(req.caller, 'network.set', { context: req.params.name, policy: req.body }));

  app.delete<{ Params: Static<typeof NameParams> }>(base, {
    config: { op: 'network.set' }, schema: { tags: ['network'], params: NameParams, response: { 200: ContextNetwork, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'network.set', { context: req.params.name, policy: null }));

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof LogQuery> }>(`${base}/log`, {
    config: { op: 'network.log' }, schema: { tags: ['network'], params: NameParams, querystring: LogQuery, response: { 200: Type.Object({ connections: Type.Array(Connection) }), ...errorResponses } },
  }, async (req) => ({ connections: await ops.run(req.caller, 'network.log', { context: req.params.name, limit: req.query.limit ?? 100 }) }));
}

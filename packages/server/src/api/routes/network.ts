import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { NameParams, NetworkPolicy, NetworkPolicyIn, errorResponses } from '../schemas.js';

export const ContextNetwork = Type.Object({
  policy: Type.Union([NetworkPolicy, Type.Null()]), effective: NetworkPolicy,
});
export const Connection = Type.Object({
  time: Type.String(), host: Type.String(), port: Type.Integer(), bytesOut: Type.Number(), bytesIn: Type.Number(),
  allowed: Type.Boolean(), reason: Type.Optional(Type.String()),
  kind: Type.Union([Type.Literal('query'), Type.Literal('service'), Type.Literal('machine')]),
});
const LogQuery = Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })) }, { additionalProperties: false });
const denied = { 403: errorResponses[401], ...errorResponses };

/** A context's egress policy (kept with it, inherited by forks) and its audit log. */
export function networkRoutes(app: FastifyInstance, engine: Engine): void {
  const base = '/v1/contexts/:name/network';
  app.get<{ Params: Static<typeof NameParams> }>(base, {
    schema: { tags: ['network'], params: NameParams, response: { 200: ContextNetwork, ...errorResponses } },
  }, async (req) => engine.network.get(req.caller, req.params.name));

  app.put<{ Params: Static<typeof NameParams>; Body: Static<typeof NetworkPolicyIn> }>(base, {
    schema: { tags: ['network'], params: NameParams, body: NetworkPolicyIn, response: { 200: ContextNetwork, ...denied } },
  }, async (req) => engine.network.set(req.caller, req.params.name, req.body));

  app.delete<{ Params: Static<typeof NameParams> }>(base, {
    schema: { tags: ['network'], params: NameParams, response: { 200: ContextNetwork, ...errorResponses } },
  }, async (req) => engine.network.set(req.caller, req.params.name, null));

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof LogQuery> }>(`${base}/log`, {
    schema: { tags: ['network'], params: NameParams, querystring: LogQuery, response: { 200: Type.Object({ connections: Type.Array(Connection) }), ...errorResponses } },
  }, async (req) => ({ connections: await engine.network.log(req.caller, req.params.name, req.query.limit ?? 100) }));
}

import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { errorResponses } from '../schemas.js';

const UsageQuery = Type.Object({
  from: Type.Optional(Type.String({ maxLength: 64 })),
  to: Type.Optional(Type.String({ maxLength: 64 })),
  groupBy: Type.Optional(Type.Union([Type.Literal('context'), Type.Literal('kind'), Type.Literal('day'), Type.Literal('hour')])),
  tenant: Type.Optional(Type.String({ maxLength: 128 })),
}, { additionalProperties: false });
export const Item = Type.Object({
  key: Type.String(), queries: Type.Integer(), cpuMs: Type.Number(), wallMs: Type.Number(),
  serviceSeconds: Type.Number(), machineSeconds: Type.Number(), serviceActiveSeconds: Type.Number(), machineActiveSeconds: Type.Number(), machineMbSeconds: Type.Number(),
  egressBytes: Type.Number(), ingressBytes: Type.Number(), bytesStored: Type.Number(),
});

/** GET /v1/usage: the caller's usage (the admin may name a tenant). */
export function usageRoutes(app: FastifyInstance, engine: Engine): void {
  app.get<{ Querystring: Static<typeof UsageQuery> }>('/v1/usage', {
    schema: {
      tags: ['usage'], querystring: UsageQuery,
      response: { 200: Type.Object({ items: Type.Array(Item), total: Item }), 403: errorResponses[401], ...errorResponses },
    },
  }, async (req) => engine.usage.summary(req.caller, req.query));
}

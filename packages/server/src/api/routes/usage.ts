import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { UsageItemSchema as Item, UsageQuerySchema as UsageQuery } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

/** GET /v1/usage: the caller's usage (the admin may name a tenant). */
export function usageRoutes(app: FastifyInstance, ops: Operations): void {
  app.get<{ Querystring: Static<typeof UsageQuery> }>('/v1/usage', {
    config: { op: 'usage.summary' }, schema: {
      tags: ['usage'], querystring: UsageQuery,
      response: { 200: Type.Object({ items: Type.Array(Item), total: Item }), 403: errorResponses[401], ...errorResponses },
    },
  }, async (req) => ops.run(req.caller, 'usage.summary', { query: req.query }));
}

import type { FastifyInstance } from 'fastify';
import type { Operations } from '../../ops/dispatch.js';
import { GcResultSchema as GcResult } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

/** POST /v1/gc (admin key): one garbage collection run now; it also runs in the background. */
export function gcRoutes(app: FastifyInstance, ops: Operations): void {
  app.post('/v1/gc', {
    config: { op: 'store.collectGarbage' }, schema: { tags: ['operations'], response: { 200: GcResult, 403: errorResponses[401], ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'store.collectGarbage', {}));
}

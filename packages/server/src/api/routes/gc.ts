import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { errorResponses } from '../schemas.js';

export const GcResult = Type.Object({
  versionsDropped: Type.Integer(), layersDeleted: Type.Integer(), bytesFreed: Type.Number(),
  deferredLayers: Type.Integer(), templatesDeleted: Type.Integer(), usageRowsRolledUp: Type.Integer(), complete: Type.Boolean(), ms: Type.Number(),
});

/** POST /v1/gc (admin key): one garbage collection run now; it also runs in the background. */
export function gcRoutes(app: FastifyInstance, engine: Engine): void {
  app.post('/v1/gc', {
    schema: { tags: ['operations'], response: { 200: GcResult, 403: errorResponses[401], ...errorResponses } },
  }, async (req) => engine.collectGarbage(req.caller));
}

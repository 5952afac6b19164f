import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { ContextSchema as Context, DiffQuerySchema as DiffQuery, DiffResultSchema as DiffResult, MergeBodySchema as MergeBody, NameParamsSchema as NameParams, ResetBodySchema as ResetBody } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

/** Time travel, diff and merge. */
export function historyRoutes(app: FastifyInstance, ops: Operations): void {
  app.post<{ Params: Static<typeof NameParams>; Body: Static<typeof ResetBody> }>('/v1/contexts/:name/reset', {
    config: { op: 'context.reset' }, schema: { tags: ['history'], params: NameParams, body: ResetBody, response: { 200: Context, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'context.reset', { context: req.params.name, version: req.body.version }));

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof DiffQuery> }>('/v1/contexts/:name/diff', {
    config: { op: 'context.diff' }, schema: { tags: ['history'], params: NameParams, querystring: DiffQuery, response: { 200: DiffResult, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'context.diff', { context: req.params.name, range: req.query }));

  app.post<{ Params: Static<typeof NameParams>; Body: Static<typeof MergeBody> }>('/v1/contexts/:name/merge', {
    config: { op: 'context.merge' }, schema: {
      tags: ['history'], params: NameParams, body: MergeBody,
      response: { 200: Type.Object({ version: Type.String() }), ...errorResponses },
    },
  }, async (req) => ops.run(req.caller, 'context.merge', { context: req.params.name, from: req.body.from }));
}

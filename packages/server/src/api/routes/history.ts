import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { DIFF_KINDS, FILE_TYPES } from '@shellbase/protocol';
import { Context, NameParams, VersionId, errorResponses, oneOf } from '../schemas.js';

const ResetBody = Type.Object({ version: VersionId }, { additionalProperties: false });
const MergeBody = Type.Object({ from: Type.String({ minLength: 1, maxLength: 128 }) }, { additionalProperties: false });
const DiffQuery = Type.Object({
  from: Type.Optional(VersionId), to: Type.Optional(VersionId), path: Type.Optional(Type.String({ maxLength: 4096 })),
}, { additionalProperties: false });
export const DiffResult = Type.Object({
  changes: Type.Array(Type.Object({
    path: Type.String(), kind: oneOf(DIFF_KINDS), type: oneOf(FILE_TYPES), size: Type.Optional(Type.Integer()),
  })),
  patch: Type.Optional(Type.String()),
});

/** Time travel, diff and merge. */
export function historyRoutes(app: FastifyInstance, engine: Engine): void {
  app.post<{ Params: Static<typeof NameParams>; Body: Static<typeof ResetBody> }>('/v1/contexts/:name/reset', {
    schema: { tags: ['history'], params: NameParams, body: ResetBody, response: { 200: Context, ...errorResponses } },
  }, async (req) => {
    await engine.history.reset(req.caller, req.params.name, req.body.version);
    return engine.getContext(req.caller, req.params.name);
  });

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof DiffQuery> }>('/v1/contexts/:name/diff', {
    schema: { tags: ['history'], params: NameParams, querystring: DiffQuery, response: { 200: DiffResult, ...errorResponses } },
  }, async (req) => engine.history.diff(req.caller, req.params.name, req.query));

  app.post<{ Params: Static<typeof NameParams>; Body: Static<typeof MergeBody> }>('/v1/contexts/:name/merge', {
    schema: {
      tags: ['history'], params: NameParams, body: MergeBody,
      response: { 200: Type.Object({ version: Type.String() }), ...errorResponses },
    },
  }, async (req) => engine.history.merge(req.caller, req.params.name, req.body.from));
}

import type { FastifyInstance } from 'fastify';
import type { Readable } from 'node:stream';
import type { Static } from 'typebox';
import { invalid } from '../../errors.js';
import type { Operations } from '../../ops/dispatch.js';
import { ContextImportQuerySchema as ImportQuery, ContextSchema as Context, ExportQuerySchema as ExportQuery, NameParamsSchema as NameParams } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

/** The media type of a context archive (docs/formats.md). */
const ARCHIVE_TYPE = 'application/vnd.shellbase.context.v1+tar';

/** Contexts as archives: export one (streamed), import one (a streamed body) as a new context. */
export function transferRoutes(app: FastifyInstance, ops: Operations): void {
  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof ExportQuery> }>('/v1/contexts/:name/export', {
    config: { op: 'context.export' }, schema: { tags: ['contexts'], params: NameParams, querystring: ExportQuery, response: { ...errorResponses } },
  }, async (req, reply) => {
    const q = req.query;
    const archive = await ops.run(req.caller, 'context.export', {
      context: req.params.name, opts: { ...(q.version !== undefined ? { version: q.version } : {}), history: q.history === true },
    });
    return reply.type(ARCHIVE_TYPE).header('content-disposition', `attachment; filename="${req.params.name}.sbx"`).send(archive);
  });

  // The archive streams into the import: this scope takes any body as a raw stream.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
    scope.post<{ Querystring: Static<typeof ImportQuery> }>('/v1/contexts/import', {
      config: { op: 'context.import' }, schema: { tags: ['contexts'], querystring: ImportQuery, response: { 201: Context, ...errorResponses } },
    }, async (req, reply) => {
      if (!req.body) throw invalid('the archive is missing', 'send the archive `shellbase export` wrote as the request body');
      const context = await ops.run(req.caller, 'context.import', { body: req.body as Readable, opts: { ...(req.query.as !== undefined ? { as: req.query.as } : {}) } });
      return reply.status(201).send(context);
    });
  });
}

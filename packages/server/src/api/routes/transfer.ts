import type { FastifyInstance } from 'fastify';
import type { Readable } from 'node:stream';
import type { Static } from 'typebox';
import { invalid } from '../../errors.js';
import type { Operations } from '../../ops/dispatch.js';
import {
  ContextImportQuerySchema as ImportQuery, ContextSchema as Context, ExportQuerySchema as ExportQuery, NameParamsSchema as NameParams,
  OciExportQuerySchema as OciQuery, PushBodySchema as PushBody, PushResultSchema as PushResult,
  BackupBodySchema as BackupBody, BackupResultSchema as BackupResult,
} from '@shellbase/protocol/schemas';
import { respondEvents } from '../ndjson.js';
import { plainConnection, sendArchive } from '../archive-response.js';
import { errorResponses } from '../schemas.js';

/** The media type of a context archive (docs/formats.md). */
const ARCHIVE_TYPE = 'application/vnd.shellbase.context.v1+tar';
/** The media type of an OCI image layout as a tar (an "OCI archive"). */
const OCI_ARCHIVE_TYPE = 'application/vnd.oci.image.layout.v1+tar';

/**
 * Contexts as archives: export one (streamed), import one (a streamed body) as a new context; as
 * OCI images: a layout (streamed) or a push. The whole server into a backup target (progress as
 * NDJSON with `Accept: application/x-ndjson`).
 */
export function transferRoutes(app: FastifyInstance, ops: Operations): void {
  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof ExportQuery> }>('/v1/contexts/:name/export', {
    config: { op: 'context.export' }, schema: { tags: ['contexts'], params: NameParams, querystring: ExportQuery, response: { ...errorResponses } },
  }, async (req, reply) => {
    const q = req.query;
    const archive = await ops.run(req.caller, 'context.export', {
      context: req.params.name, opts: { ...(q.version !== undefined ? { version: q.version } : {}), history: q.history === true },
    });
    const headers = { 'content-type': ARCHIVE_TYPE, 'content-disposition': `attachment; filename="${req.params.name}.sbx"` };
    const fd = plainConnection(req, reply);
    if (fd === null) return reply.headers(headers).send(archive.stream());
    await sendArchive(req, reply, fd, headers, archive);
    return reply;
  });

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof OciQuery> }>('/v1/contexts/:name/export/oci', {
    config: { op: 'context.exportOci' }, schema: { tags: ['contexts'], params: NameParams, querystring: OciQuery, response: { ...errorResponses } },
  }, async (req, reply) => {
    const q = req.query;
    const layout = await ops.run(req.caller, 'context.exportOci', {
      context: req.params.name, opts: { ...(q.version !== undefined ? { version: q.version } : {}), ...(q.tag !== undefined ? { tag: q.tag } : {}) },
    });
    return reply.type(OCI_ARCHIVE_TYPE).header('content-disposition', `attachment; filename="${req.params.name}.oci.tar"`).send(layout);
  });

  app.post<{ Params: Static<typeof NameParams>; Body: Static<typeof PushBody> }>('/v1/contexts/:name/push', {
    config: { op: 'context.push' }, schema: { tags: ['contexts'], params: NameParams, body: PushBody, response: { 200: PushResult, ...errorResponses } },
  }, async (req) => {
    const b = req.body;
    return ops.run(req.caller, 'context.push', {
      context: req.params.name,
      opts: {
        ref: b.ref, ...(b.version !== undefined ? { version: b.version } : {}), ...(b.credentials ? { credentials: b.credentials } : {}),
        ...(b.insecure ? { insecure: true } : {}),
      },
    });
  });

  app.post<{ Body: Static<typeof BackupBody> }>('/v1/backups', {
    config: { op: 'server.backup' }, schema: { tags: ['operations'], body: BackupBody, response: { 200: BackupResult, 403: errorResponses[401], ...errorResponses } },
  }, async (req, reply) => respondEvents(req.headers.accept, reply, 'backup', async (report) => {
    const b = req.body;
    return ops.run(req.caller, 'server.backup', {
      opts: { to: b.to, ...(b.s3Endpoint !== undefined ? { s3Endpoint: b.s3Endpoint } : {}), ...(b.keep !== undefined ? { keep: b.keep } : {}) },
      progress: (p) => report({ type: 'progress', ...p }),
    });
  }));

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

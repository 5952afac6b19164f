import type { FastifyInstance } from 'fastify';
import type { Readable } from 'node:stream';
import { Type, type Static } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { invalid } from '../../errors.js';
import { respondEvents } from '../ndjson.js';
import { BuildQuerySchema as BuildQuery, BuildResultSchema, ImageRefParamsSchema as RefParams, ImageSchema, ImportQuerySchema as ImportQuery, PullBodySchema as PullBody } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

/** `buildArg` values as a map; a value without `=` is refused. */
function buildArgs(given: string | string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const a of given === undefined ? [] : Array.isArray(given) ? given : [given]) {
    const eq = a.indexOf('=');
    if (eq <= 0) throw invalid(`buildArg ${JSON.stringify(a)} is not NAME=VALUE`, 'pass buildArg=NAME=VALUE');
    out[a.slice(0, eq)] = a.slice(eq + 1);
  }
  return out;
}

/**
 * OCI images: pull from a registry, import an archive (OCI layout or `docker
 * save`), list, delete; and Dockerfile builds. Pulls, imports and builds
 * report progress as NDJSON with `Accept: application/x-ndjson`.
 */
export function imageRoutes(app: FastifyInstance, ops: Operations): void {
  app.addSchema(ImageSchema);

  app.post<{ Body: Static<typeof PullBody> }>('/v1/images/pull', {
    config: { op: 'image.pull' }, schema: { tags: ['images'], body: PullBody, response: { 200: Type.Object({ image: ImageSchema }), ...errorResponses } },
  }, async (req, reply) => respondEvents(req.headers.accept, reply, 'image', async (report, signal) =>
    ({ image: await ops.run(req.caller, 'image.pull', { req: req.body, progress: (p) => report({ type: 'progress', ...p }), signal }) })));

  app.get('/v1/images', {
    config: { op: 'image.list' }, schema: { tags: ['images'], response: { 200: Type.Object({ images: Type.Array(ImageSchema) }), ...errorResponses } },
  }, async (req) => ({ images: await ops.run(req.caller, 'image.list', {}) }));

  app.delete<{ Params: Static<typeof RefParams> }>('/v1/images/*', {
    config: { op: 'image.delete' }, schema: { tags: ['images'], params: RefParams, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => {
    await ops.run(req.caller, 'image.delete', { ref: req.params['*'] });
    return reply.status(204).send();
  });

  // An archive streams to the import's spool: this scope takes any body as a raw stream.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
    scope.post<{ Querystring: Static<typeof ImportQuery> }>('/v1/images/import', {
      config: { op: 'image.import' }, schema: { tags: ['images'], querystring: ImportQuery, response: { 200: Type.Object({ images: Type.Array(ImageSchema) }), ...errorResponses } },
    }, async (req, reply) => {
      if (!req.body) throw invalid('the archive is missing', 'send the archive (a tar) as the request body');
      return respondEvents(req.headers.accept, reply, 'images', async (report) =>
        ({ images: await ops.run(req.caller, 'image.import', { body: req.body as Readable, opts: { ref: req.query.ref }, progress: (p) => report({ type: 'progress', ...p }) }) }));
    });

    // A Dockerfile build: the body is the build context as a tar; NDJSON step events, then `result`.
    scope.post<{ Querystring: Static<typeof BuildQuery> }>('/v1/builds', {
      config: { op: 'image.build' }, schema: { tags: ['builds'], querystring: BuildQuery, response: { 200: BuildResultSchema, ...errorResponses } },
    }, async (req, reply) => {
      if (!req.body) throw invalid('the build context is missing', 'send the build directory as a tar in the request body');
      const q = req.query;
      const args = buildArgs(q.buildArg);
      return respondEvents(req.headers.accept, reply, 'result', async (report, signal) => ({
        ...(await ops.run(req.caller, 'image.build', {
          req: { tag: q.tag, ...(q.dockerfile ? { dockerfile: q.dockerfile } : {}), noCache: q.noCache === true, buildArgs: args },
          body: req.body as Readable, report: (e) => report({ ...e }), signal,
        })),
      }));
    });
  });
}

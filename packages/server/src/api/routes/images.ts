import type { FastifyInstance } from 'fastify';
import type { Readable } from 'node:stream';
import { Type, type Static } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { invalid } from '../../errors.js';
import { respondEvents } from '../ndjson.js';
import { errorResponses } from '../schemas.js';

const Ref = Type.String({ minLength: 1, maxLength: 512 });
const Env = Type.Record(Type.String(), Type.String());

export const ImageSchema = Type.Object({
  ref: Type.String(), digest: Type.String(), version: Type.String(), layers: Type.Integer(), bytes: Type.Integer(), createdAt: Type.String(),
  config: Type.Object({
    env: Env, cwd: Type.Optional(Type.String()), user: Type.Optional(Type.String()),
    entrypoint: Type.Optional(Type.Array(Type.String())), cmd: Type.Optional(Type.Array(Type.String())),
    exposedPorts: Type.Optional(Type.Array(Type.String())), labels: Type.Optional(Env),
  }),
}, { $id: 'Image' });

const PullBody = Type.Object({ ref: Ref, insecure: Type.Optional(Type.Boolean()) }, { additionalProperties: false });
const ImportQuery = Type.Object({ ref: Type.Optional(Ref) }, { additionalProperties: false });
const RefParams = Type.Object({ '*': Type.String({ maxLength: 512 }) });
const BuildQuery = Type.Object({
  tag: Type.String({ minLength: 1, maxLength: 128 }), dockerfile: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
  noCache: Type.Optional(Type.Boolean()),
  /** Build arguments, each `NAME=VALUE` (repeat the parameter for more). */
  buildArg: Type.Optional(Type.Union([Type.String({ maxLength: 65536 }), Type.Array(Type.String({ maxLength: 65536 }), { maxItems: 256 })])),
}, { additionalProperties: false });
const BuildStepSchema = Type.Object({ instruction: Type.String(), cached: Type.Boolean(), version: Type.String(), ms: Type.Number() });
export const BuildResultSchema = Type.Object({ context: Type.String(), version: Type.String(), steps: Type.Array(BuildStepSchema) }, { $id: 'BuildResult' });

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
export function imageRoutes(app: FastifyInstance, engine: Engine): void {
  app.addSchema(ImageSchema);

  app.post<{ Body: Static<typeof PullBody> }>('/v1/images/pull', {
    schema: { tags: ['images'], body: PullBody, response: { 200: Type.Object({ image: ImageSchema }), ...errorResponses } },
  }, async (req, reply) => respondEvents(req.headers.accept, reply, 'image', async (report, signal) =>
    ({ image: await engine.images.pull(req.caller, req.body, (p) => report({ type: 'progress', ...p }), signal) })));

  app.get('/v1/images', {
    schema: { tags: ['images'], response: { 200: Type.Object({ images: Type.Array(ImageSchema) }), ...errorResponses } },
  }, async (req) => ({ images: await engine.images.list(req.caller) }));

  app.delete<{ Params: Static<typeof RefParams> }>('/v1/images/*', {
    schema: { tags: ['images'], params: RefParams, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => {
    await engine.images.delete(req.caller, req.params['*']);
    return reply.status(204).send();
  });

  // An archive streams to the import's spool: this scope takes any body as a raw stream.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
    scope.post<{ Querystring: Static<typeof ImportQuery> }>('/v1/images/import', {
      schema: { tags: ['images'], querystring: ImportQuery, response: { 200: Type.Object({ images: Type.Array(ImageSchema) }), ...errorResponses } },
    }, async (req, reply) => {
      if (!req.body) throw invalid('the archive is missing', 'send the archive (a tar) as the request body');
      return respondEvents(req.headers.accept, reply, 'images', async (report) =>
        ({ images: await engine.images.import(req.caller, req.body as Readable, { ref: req.query.ref }, (p) => report({ type: 'progress', ...p })) }));
    });

    // A Dockerfile build: the body is the build context as a tar; NDJSON step events, then `result`.
    scope.post<{ Querystring: Static<typeof BuildQuery> }>('/v1/builds', {
      schema: { tags: ['builds'], querystring: BuildQuery, response: { 200: BuildResultSchema, ...errorResponses } },
    }, async (req, reply) => {
      if (!req.body) throw invalid('the build context is missing', 'send the build directory as a tar in the request body');
      const q = req.query;
      const args = buildArgs(q.buildArg);
      return respondEvents(req.headers.accept, reply, 'result', async (report, signal) => ({
        ...(await engine.builds.build(req.caller, { tag: q.tag, ...(q.dockerfile ? { dockerfile: q.dockerfile } : {}), noCache: q.noCache === true, buildArgs: args },
          req.body as Readable, (e) => report({ ...e }), signal)),
      }));
    });
  });
}

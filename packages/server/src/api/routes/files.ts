import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Readable } from 'node:stream';
import type { Engine } from '../../engine/engine.js';
import { ShellbaseError, invalid } from '../../errors.js';
import { FILE_TYPES } from '@shellbase/protocol';
import { errorResponses, oneOf } from '../schemas.js';

const FileParams = Type.Object({ name: Type.String({ maxLength: 1024 }), '*': Type.String() });
const ReadQuery = Type.Object({ version: Type.Optional(Type.String({ maxLength: 128 })) }, { additionalProperties: false });
const WriteQuery = Type.Object({
  mode: Type.Optional(Type.String({ pattern: '^0?[0-7]{3,4}$' })),
  format: Type.Optional(Type.Literal('tar')),
}, { additionalProperties: false });
const DeleteQuery = Type.Object({ recursive: Type.Optional(Type.Boolean()) }, { additionalProperties: false });
const VersionResult = Type.Object({ version: Type.String() });
export const Stat = Type.Object({
  type: oneOf(FILE_TYPES), size: Type.Integer(), mode: Type.Integer(), uid: Type.Integer(), gid: Type.Integer(), mtime: Type.String(),
  target: Type.Optional(Type.String()),
});

type P = Static<typeof FileParams>;
const SMALL_FILE = 64 * 1024;
const pathOf = (p: P) => `/${p['*']}`;

/** Parses `Range: bytes=a-b` (one range) against a size. */
function parseRange(header: string, size: number): { start: number; end: number } {
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) throw invalid(`unsupported Range ${JSON.stringify(header)}`, 'send one range: bytes=START-END');
  let start: number;
  let end: number;
  if (m[1] === '') { start = Math.max(0, size - Number(m[2])); end = size - 1; }
  else { start = Number(m[1]); end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1); }
  if (start > end || start >= size) {
    throw invalid(`range ${header} is outside the file (${size} bytes)`, `ask for bytes between 0 and ${size - 1}`);
  }
  return { start, end };
}

/** Files without a sandbox: GET/PUT/DELETE .../files/PATH and GET .../stat/PATH. */
export function fileRoutes(app: FastifyInstance, engine: Engine): void {
  app.get<{ Params: P; Querystring: Static<typeof ReadQuery> }>('/v1/contexts/:name/files/*', {
    schema: { tags: ['files'], params: FileParams, querystring: ReadQuery, response: { ...errorResponses } },
  }, async (req, reply) => {
    const r = await engine.files.read(req.caller, req.params.name, pathOf(req.params), req.query.version);
    void reply.header('x-shellbase-version', r.version);
    if (r.kind === 'dir') return reply.send({ entries: r.entries });
    void reply.header('accept-ranges', 'bytes').type('application/octet-stream');
    const range = req.headers.range;
    if (range && r.size > 0) {
      const { start, end } = parseRange(range, r.size);
      return reply.status(206).header('content-range', `bytes ${start}-${end}/${r.size}`)
        .header('content-length', end - start + 1).send(r.stream({ start, end }));
    }
    // Small files in one synchronous read (no thread-pool round trips); large ones stream.
    return reply.header('content-length', r.size).send(r.size <= SMALL_FILE ? r.readAll() : r.stream());
  });

  app.get<{ Params: P; Querystring: Static<typeof ReadQuery> }>('/v1/contexts/:name/stat/*', {
    schema: { tags: ['files'], params: FileParams, querystring: ReadQuery, response: { 200: Stat, ...errorResponses } },
  }, async (req) => engine.files.stat(req.caller, req.params.name, pathOf(req.params), req.query.version));

  app.delete<{ Params: P; Querystring: Static<typeof DeleteQuery> }>('/v1/contexts/:name/files/*', {
    schema: { tags: ['files'], params: FileParams, querystring: DeleteQuery, response: { 200: VersionResult, ...errorResponses } },
  }, async (req) => engine.files.remove(req.caller, req.params.name, pathOf(req.params), req.query.recursive ?? false));

  // Uploads stream to disk: this scope takes any body as a raw stream.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
    scope.put<{ Params: P; Querystring: Static<typeof WriteQuery> }>('/v1/contexts/:name/files/*', {
      schema: { tags: ['files'], params: FileParams, querystring: WriteQuery, response: { 200: VersionResult, ...errorResponses } },
    }, async (req) => {
      const length = req.headers['content-length'] === undefined ? undefined : Number(req.headers['content-length']);
      if (req.query.format === 'tar') return engine.files.writeTar(req.caller, req.params.name, pathOf(req.params), req.body as Readable, { length });
      const mode = req.query.mode ? parseInt(req.query.mode, 8) : 0o644;
      return engine.files.write(req.caller, req.params.name, pathOf(req.params), req.body as Readable, { mode, length });
    });
  });
}

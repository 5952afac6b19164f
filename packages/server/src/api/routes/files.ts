import type { FastifyInstance } from 'fastify';
import type { Static } from 'typebox';
import type { Readable } from 'node:stream';
import type { Operations } from '../../ops/dispatch.js';
import { ShellbaseError, invalid } from '../../errors.js';
import { DeleteFileQuerySchema as DeleteQuery, FileParamsSchema as FileParams, FileStatSchema as Stat, ReadFileQuerySchema as ReadQuery, VersionResultSchema as VersionResult, WriteFileQuerySchema as WriteQuery } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

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
export function fileRoutes(app: FastifyInstance, ops: Operations): void {
  app.get<{ Params: P; Querystring: Static<typeof ReadQuery> }>('/v1/contexts/:name/files/*', {
    config: { op: 'file.read' }, schema: { tags: ['files'], params: FileParams, querystring: ReadQuery, response: { ...errorResponses } },
  }, async (req, reply) => {
    const r = await ops.run(req.caller, 'file.read', { context: req.params.name, path: pathOf(req.params), version: req.query.version });
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
    config: { op: 'file.stat' }, schema: { tags: ['files'], params: FileParams, querystring: ReadQuery, response: { 200: Stat, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'file.stat', { context: req.params.name, path: pathOf(req.params), version: req.query.version }));

  app.delete<{ Params: P; Querystring: Static<typeof DeleteQuery> }>('/v1/contexts/:name/files/*', {
    config: { op: 'file.remove' }, schema: { tags: ['files'], params: FileParams, querystring: DeleteQuery, response: { 200: VersionResult, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'file.remove', { context: req.params.name, path: pathOf(req.params), recursive: req.query.recursive ?? false }));

  // Uploads stream to disk: this scope takes any body as a raw stream.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
    scope.put<{ Params: P; Querystring: Static<typeof WriteQuery> }>('/v1/contexts/:name/files/*', {
      config: { op: 'file.write' }, schema: { tags: ['files'], params: FileParams, querystring: WriteQuery, response: { 200: VersionResult, ...errorResponses } },
    }, async (req) => {
      const length = req.headers['content-length'] === undefined ? undefined : Number(req.headers['content-length']);
      if (req.query.format === 'tar') return ops.run(req.caller, 'file.writeTar', { context: req.params.name, path: pathOf(req.params), body: req.body as Readable, opts: { length } });
      const mode = req.query.mode ? parseInt(req.query.mode, 8) : 0o644;
      return ops.run(req.caller, 'file.write', { context: req.params.name, path: pathOf(req.params), body: req.body as Readable, opts: { mode, length } });
    });
  });
}

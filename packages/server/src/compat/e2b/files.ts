import type { IncomingMessage, ServerResponse } from 'node:http';
import { createGunzip, createGzip } from 'node:zlib';
import { GUEST_AGENT } from '../../machines/index.js';
import { ConnectError, toConnectError, type ConnectCode } from './connect.js';
import type { EnvdCall, HttpRoute } from './envd.js';
import { fsError, fsOp, startAs, type GuestEntry } from './guest.js';
import { boundaryOf, multipart } from './multipart.js';
import { checkSignature } from './signed-urls.js';

/** envd's HTTP statuses for file errors (the SDK maps 404 to FileNotFoundError, 507 to NotEnoughSpaceError). */
const STATUS: Partial<Record<ConnectCode, number>> = {
  invalid_argument: 400, not_found: 404, permission_denied: 403, already_exists: 409, resource_exhausted: 507, unauthenticated: 401,
  failed_precondition: 400, unavailable: 502,
};

function fail(res: ServerResponse, e: unknown): void {
  const err = toConnectError(e);
  const body = JSON.stringify({ code: STATUS[err.code] ?? 500, message: err.message });
  if (res.headersSent) { res.destroy(); return; }
  res.writeHead(STATUS[err.code] ?? 500, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}

function pathParam(url: URL): string {
  const p = url.searchParams.get('path');
  if (!p || p.includes('\0') || p.length > 4096) throw new ConnectError('invalid_argument', 'path is required');
  return p;
}

/** GET /files?path=: the file's bytes, streamed as they come from the guest (gzip when asked). */
const read: HttpRoute = async (call, req, res, url) => {
  try {
    checkSignature(call.sandbox.e2b.accessToken, url, 'GET');
    const file = pathParam(url);
    const gzip = /\bgzip\b/.test(req.headers['accept-encoding'] ?? '');
    await call.withAgent(async (agent) => {
      const err: Buffer[] = [];
      let out: NodeJS.WritableStream | null = null;
      const begin = () => {
        if (out) return out;
        res.writeHead(200, { 'content-type': 'application/octet-stream', ...(gzip ? { 'content-encoding': 'gzip' } : {}) });
        if (gzip) { const z = createGzip(); z.pipe(res); out = z; } else out = res;
        return out;
      };
      const p = await startAs(agent, { argv: [GUEST_AGENT, '--fs', 'read', file], user: call.user }, {
        onStdout: (c) => { begin().write(Buffer.from(c)); },
        onStderr: (c) => { err.push(Buffer.from(c)); },
      });
      res.once('close', () => { if (!res.writableFinished) p.kill(); });
      const exit = await p.exited;
      if (exit.code !== 0 && !out) throw fsError(Buffer.concat(err).toString());
      if (!out && !gzip) { res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': '0' }).end(); return; }
      begin().end();
    });
  } catch (e) {
    fail(res, e);
  }
};

function written(e: GuestEntry): object {
  return { name: e.name, type: e.kind === 'dir' ? 'dir' : 'file', path: e.path, ...(Object.keys(e.metadata).length ? { metadata: e.metadata } : {}) };
}

const METADATA_HEADER = 'x-metadata-';

/**
 * envd's file metadata: `X-Metadata-KEY: VALUE` headers (keys lowercased; the first of repeated
 * ones), as the arguments of `--fs write`: KEY VALUE pairs. Every written file gets them, and
 * loses what metadata it had.
 */
function metadataArgs(req: IncomingMessage): string[] {
  const args: string[] = [];
  for (const [name, values] of Object.entries(req.headersDistinct)) {
    if (!name.startsWith(METADATA_HEADER) || name.length === METADATA_HEADER.length) continue;
    const key = name.slice(METADATA_HEADER.length);
    const value = values?.[0];
    if (value === undefined) continue;
    if (!/^[\x20-\x7e]*$/.test(value)) throw new ConnectError('invalid_argument', `metadata ${JSON.stringify(key)}: values must be printable US-ASCII`);
    args.push(key, value);
  }
  return args;
}

/**
 * POST /files: multipart parts (field `file`, named by `path` or by their file names) or one
 * octet-stream body. Relative paths are from the user's home; missing directories are made for
 * the user wherever they go, as envd makes them (fsOp's `makesDirs`).
 */
const write: HttpRoute = async (call, req, res, url) => {
  try {
    checkSignature(call.sandbox.e2b.accessToken, url, 'POST');
    const target = url.searchParams.get('path');
    const metadata = metadataArgs(req);
    const results: object[] = [];
    const put = (file: string, body: AsyncIterable<Buffer>) => call.withAgent(async (agent) => {
      const [e] = await fsOp(agent, call.user, ['write', file, ...metadata], body, true);
      if (e) results.push(written(e));
    });
    const boundary = boundaryOf(req.headers['content-type']);
    if (boundary) {
      for await (const part of multipart(req, boundary)) {
        const file = target ?? part.filename;
        if (!file) throw new ConnectError('invalid_argument', 'a file part needs a path (the query\'s, or its file name)');
        await put(file, part.body);
      }
    } else {
      const gz = /\bgzip\b/.test(req.headers['content-encoding'] ?? '');
      await put(pathParam(url), gz ? req.pipe(createGunzip()) : req);
    }
    if (!results.length) throw new ConnectError('invalid_argument', 'no file in the request');
    const body = JSON.stringify(results);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
  } catch (e) {
    fail(res, e);
  }
};

/** envd's plain HTTP routes. */
export const fileRoutes: Record<string, HttpRoute> = { 'GET /files': read, 'POST /files': write };

import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ShellbaseError } from '../errors.js';

/** packages/console/dist, found from this file (src/api or dist/api of packages/server), never from the cwd. */
export const CONSOLE_DIST = fileURLToPath(new URL('../../../console/dist/', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
};
const COMPRESSIBLE = new Set(['.html', '.js', '.mjs', '.css', '.json', '.map', '.svg', '.txt']);
/** Vite names what it emits under assets/ by content hash: a new build never reuses a name. */
const HASHED = /^assets\//;

interface Cached { mtimeMs: number; size: number; body: Buffer; gzip?: Buffer }

/**
 * The web console (packages/console, built by `npm run build`) at /console/: static files only,
 * no route of its own beyond them, no key needed to load it (the console asks for one and then
 * calls /v1 like any client). index.html is `no-cache`; hashed assets are cached for a year.
 */
export function consoleRoutes(app: FastifyInstance, root: string = CONSOLE_DIST): void {
  const cache = new Map<string, Cached>();

  async function send(req: FastifyRequest, reply: FastifyReply, rel: string): Promise<FastifyReply> {
    const index = path.join(root, 'index.html');
    const built = await stat(index).then((s) => s.isFile(), () => false);
    if (!built) {
      throw new ShellbaseError('unavailable', 'the web console is not built', {
        hint: 'run `npm run build` (or scripts/setup) in the shellbase checkout, then reload',
      });
    }
    const file = resolveInside(root, rel === '' ? 'index.html' : rel);
    const st = file === null ? null : await stat(file).catch(() => null);
    if (file === null || st === null || !st.isFile()) {
      throw new ShellbaseError('not_found', `no console file ${JSON.stringify(`/console/${rel}`)}`, { hint: 'open /console/' });
    }
    let entry = cache.get(file);
    if (!entry || entry.mtimeMs !== st.mtimeMs || entry.size !== st.size) {
      entry = { mtimeMs: st.mtimeMs, size: st.size, body: await readFile(file) };
      cache.set(file, entry);
    }
    const ext = path.extname(file).toLowerCase();
    const name = path.relative(root, file).split(path.sep).join('/');
    void reply.type(TYPES[ext] ?? 'application/octet-stream')
      .header('cache-control', HASHED.test(name) ? 'public, max-age=31536000, immutable' : 'no-cache')
      .header('x-content-type-options', 'nosniff');
    if (COMPRESSIBLE.has(ext) && entry.body.length > 1024 && /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''))) {
      entry.gzip ??= gzipSync(entry.body);
      return reply.header('content-encoding', 'gzip').header('vary', 'accept-encoding').send(entry.gzip);
    }
    return reply.send(entry.body);
  }

  app.get('/console', { schema: { hide: true } }, (req, reply) => send(req, reply, ''));
  app.get<{ Params: { '*': string } }>('/console/*', { schema: { hide: true } }, (req, reply) => send(req, reply, req.params['*']));
}

/** `rel` (already URL-decoded) as a path below `root`, or null when it would leave it or is not a plain path. */
export function resolveInside(root: string, rel: string): string | null {
  if (rel.includes('\0') || rel.includes('\\')) return null;
  const base = path.resolve(root);
  const file = path.resolve(base, `.${path.posix.normalize(`/${rel}`)}`);
  return file.startsWith(base + path.sep) ? file : null;
}

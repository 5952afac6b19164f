import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context, FileStat } from '@shellbase/protocol';
import type { Caller } from '../../core/deps.js';
import { ShellbaseError, invalid } from '../../errors.js';
import type { Operations } from '../../ops/dispatch.js';
import { apiAuthorization, bearerOf, readJson, sendError, sendJson } from './http.js';

/** The label that makes a context one of E2B's volumes, holding its content token. */
export const VOLUME_LABEL = 'e2b.volume.token';
/** How deep a listing may recurse. */
const MAX_DEPTH = 16;

export function isVolumePath(path: string): boolean {
  return /^\/(volumes|volumecontent)(\/|$)/.test(path);
}

/** E2B's VolumeEntryStat. */
interface VolumeStat {
  name: string; path: string; type: 'file' | 'directory' | 'symlink' | 'unknown'; size: number; mode: number; uid: number; gid: number;
  atime: string; mtime: string; ctime: string; target?: string;
}

/**
 * E2B's volumes: a volume is a context of the tenant (its name is the volume's id and name), made
 * empty, labelled with its content token. The control plane (`/volumes`, the API key) makes, lists,
 * describes and deletes them; the content API (`/volumecontent/{id}/…`, with the volume's token:
 * E2B_VOLUME_API_URL points at this API port) reads and writes their files through the files
 * API, each write a version of the context. A sandbox sees a volume through `volumeMounts`.
 */
export class E2bVolumes {
  constructor(private readonly ops: Operations) {}

  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let caller: Caller | null = null;
    try {
      const url = new URL(req.url ?? '/', 'http://e2b');
      const content = /^\/volumecontent\/([^/]+)\/(dir|path|file)$/.exec(url.pathname);
      if (content) {
        const id = decodeURIComponent(content[1]);
        caller = await this.byToken(req, id);
        await this.content(caller, id, content[2] as 'dir' | 'path' | 'file', req, res, url);
        return;
      }
      caller = await this.ops.begin(apiAuthorization(req));
      const one = /^\/volumes\/([^/]+)$/.exec(url.pathname);
      if (url.pathname === '/volumes' && req.method === 'POST') await this.create(caller, req, res);
      else if (url.pathname === '/volumes' && req.method === 'GET') {
        const all = await this.ops.run(caller, 'context.list', {});
        sendJson(res, 200, all.filter(isVolume).map((c) => ({ volumeID: c.name, name: c.name })));
      } else if (one && req.method === 'GET') sendJson(res, 200, this.described(await this.volume(caller, decodeURIComponent(one[1]))));
      else if (one && req.method === 'DELETE') {
        await this.volume(caller, decodeURIComponent(one[1]));
        await this.ops.run(caller, 'context.delete', { context: decodeURIComponent(one[1]) });
        sendJson(res, 204);
      } else throw new ShellbaseError('not_found', `no route ${req.method} ${url.pathname}`);
    } catch (e) {
      sendError(res, e);
    } finally {
      const c = caller;
      if (c) res.once('close', () => c.hold.release());
    }
  }

  private async create(caller: Caller, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { name } = await readJson(req);
    if (typeof name !== 'string' || !name) throw invalid('name must be a string', 'name the volume');
    const token = `sbv.${Buffer.from(caller.tenantId).toString('base64url')}.${randomBytes(24).toString('base64url')}`;
    const c = await this.ops.run(caller, 'volume.create', { context: name, labels: { [VOLUME_LABEL]: token } });
    sendJson(res, 201, this.described(c));
  }

  private described(c: Context) {
    return { volumeID: c.name, name: c.name, token: c.config!.labels![VOLUME_LABEL] };
  }

  /** The caller's volume `id` (a context that is not a volume is not found either). */
  private async volume(caller: Caller, id: string): Promise<Context> {
    const c = await this.ops.run(caller, 'context.get', { context: id }).catch((e: unknown) => {
      throw e instanceof ShellbaseError && e.code === 'not_found' ? volumeNotFound(id) : e;
    });
    if (!isVolume(c)) throw volumeNotFound(id);
    return c;
  }

  /** The tenant a content token names, once the token is the volume's own. */
  private async byToken(req: IncomingMessage, id: string): Promise<Caller> {
    const token = bearerOf(req) ?? '';
    const m = /^sbv\.([A-Za-z0-9_-]+)\.[A-Za-z0-9_-]+$/.exec(token);
    const refused = () => new ShellbaseError('unauthorized', 'the volume token is not this volume\'s', { hint: 'use the token Volume.create or Volume.getInfo gave' });
    if (!m) throw refused();
    const caller = await this.ops.callerFor(Buffer.from(m[1], 'base64url').toString()).catch(() => { throw refused(); });
    const c = await this.ops.run(caller, 'context.get', { context: id }).catch(() => null);
    const own = c?.config?.labels?.[VOLUME_LABEL];
    if (!own || own.length !== token.length || !timingSafeEqual(Buffer.from(own), Buffer.from(token))) {
      caller.hold.release();
      throw refused();
    }
    return caller;
  }

  private async content(caller: Caller, id: string, kind: 'dir' | 'path' | 'file', req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const q = url.searchParams;
    const path = q.get('path');
    if (!path || !path.startsWith('/')) throw invalid('path must be an absolute path', 'pass ?path=/a/b');
    const at = { context: id, path };
    const owner = ownerOf(q);
    const mode = q.has('mode') ? int(q.get('mode'), 'mode') : undefined;
    const stat = async (p = path) => statOf(p, await this.ops.run(caller, 'file.stat', { context: id, path: p }));
    if (kind === 'dir' && req.method === 'GET') {
      const depth = q.has('depth') ? int(q.get('depth'), 'depth') : 1;
      if (depth < 1 || depth > MAX_DEPTH) throw invalid(`depth must be 1 to ${MAX_DEPTH}`);
      sendJson(res, 200, await this.list(caller, id, path, depth));
    } else if (kind === 'dir' && req.method === 'POST') {
      await this.ops.run(caller, 'file.mkdir', { ...at, opts: { ...(mode !== undefined ? { mode } : {}), owner, parents: q.get('force') === 'true' } });
      sendJson(res, 201, await stat());
    } else if (kind === 'path' && req.method === 'GET') sendJson(res, 200, await stat());
    else if (kind === 'path' && req.method === 'PATCH') {
      const b = await readJson(req);
      const change = { ...optInt(b.mode, 'mode', 'mode'), ...optInt(b.uid, 'uid', 'uid'), ...optInt(b.gid, 'gid', 'gid') };
      await this.ops.run(caller, 'file.setAttributes', { ...at, change });
      sendJson(res, 200, await stat());
    } else if (kind === 'path' && req.method === 'DELETE') {
      await this.ops.run(caller, 'file.remove', { ...at, recursive: true });
      sendJson(res, 204);
    } else if (kind === 'file' && req.method === 'GET') {
      const r = await this.ops.run(caller, 'file.read', at);
      if (r.kind !== 'file') throw invalid(`${path} is a directory`, 'read a file');
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': r.size });
      r.stream().on('error', () => res.destroy()).pipe(res);
    } else if (kind === 'file' && req.method === 'PUT') {
      const length = Number(req.headers['content-length'] ?? NaN);
      await this.ops.run(caller, 'file.write', { ...at, body: req, opts: { ...(mode !== undefined ? { mode } : {}), owner, ...(Number.isFinite(length) ? { length } : {}) } });
      sendJson(res, 200, await stat());
    } else throw new ShellbaseError('not_found', `no route ${req.method} ${url.pathname}`);
  }

  /** A directory's entries, and theirs down to `depth` levels. */
  private async list(caller: Caller, id: string, path: string, depth: number): Promise<VolumeStat[]> {
    const r = await this.ops.run(caller, 'file.read', { context: id, path });
    if (r.kind !== 'dir') throw invalid(`${path} is not a directory`, 'list a directory');
    const out: VolumeStat[] = [];
    for (const e of r.entries) {
      const p = `${path.replace(/\/+$/, '')}/${e.name}`;
      out.push(statOf(p, e));
      if (e.type === 'dir' && depth > 1) out.push(...(await this.list(caller, id, p, depth - 1)));
    }
    return out;
  }
}

const isVolume = (c: Context) => typeof c.config?.labels?.[VOLUME_LABEL] === 'string';

const volumeNotFound = (id: string) => new ShellbaseError('not_found', `volume ${JSON.stringify(id)} does not exist`, { details: { volume: id } });

/** E2B's VolumeEntryStat of a path (shellbase keeps one time per entry: its mtime stands for the three). */
function statOf(path: string, s: FileStat): VolumeStat {
  const type = s.type === 'dir' ? 'directory' : s.type === 'file' || s.type === 'symlink' ? s.type : 'unknown';
  const name = path.split('/').filter(Boolean).pop() ?? '';
  return { name, path, type, size: s.size, mode: s.mode, uid: s.uid, gid: s.gid, atime: s.mtime, mtime: s.mtime, ctime: s.mtime, ...(s.target !== undefined ? { target: s.target } : {}) };
}

function int(v: string | null, name: string): number {
  const n = Number(v);
  if (v === null || !/^\d+$/.test(v) || !Number.isSafeInteger(n)) throw invalid(`${name} must be a non-negative integer`);
  return n;
}

function optInt(v: unknown, name: string, key: string): Record<string, number> {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw invalid(`${name} must be a non-negative integer`);
  return { [key]: v };
}

/** The uid and gid of E2B's default user (`user`), whom sandboxes run as: what the content API writes belongs to it unless told. */
const E2B_USER_ID = 1000;

function ownerOf(q: URLSearchParams): { uid: number; gid: number } {
  return { uid: q.has('uid') ? int(q.get('uid'), 'uid') : E2B_USER_ID, gid: q.has('gid') ? int(q.get('gid'), 'gid') : E2B_USER_ID };
}

import { createHash } from 'node:crypto';
import { parseDockerignore, type Dockerignore } from '@shellbase/protocol';
import { ShellbaseError, invalid } from '../../errors.js';
import { readTar } from '../../util/tar.js';
import { SANDBOX_ROOT } from '../../util/idmap.js';
import type { Entry, VersionView } from '../files/view.js';
import { syntaxError } from './dockerfile.js';

/** The most bytes a build context may hold (it is kept in memory while the build runs). */
export const MAX_CONTEXT_BYTES = 256 << 20;

/** A tree COPY reads from: the build context, or another stage's (an image's, a context's) version. */
export interface SourceTree {
  /** Entry at a relative `/`-separated path (`''`: the root), not following a last symlink. */
  stat(rel: string): { type: 'file' | 'dir' | 'symlink'; mode: number } | null;
  list(rel: string): string[];
  read(rel: string): Buffer;
  readlink(rel: string): string;
}

/** An entry COPY writes: its absolute path in the image (segments), owner and mode as a sandbox sees them. */
export interface CopyEntry {
  segments: string[];
  type: 'file' | 'dir' | 'symlink';
  mode: number;
  uid: number;
  gid: number;
  data?: Buffer;
  linkname?: string;
}

interface Node { type: 'file' | 'dir' | 'symlink'; mode: number; data?: Buffer; linkname?: string }

/**
 * A build context sent as a tar: regular files, directories and symlinks
 * (hard links become copies; device nodes and FIFOs are dropped); names
 * with `..` refuse the archive; a leading `/` is dropped. Its .dockerignore
 * applies to what COPY and ADD see (the Dockerfile and .dockerignore
 * themselves are always readable by the build).
 */
export class BuildContext implements SourceTree {
  private readonly nodes = new Map<string, Node>([['', { type: 'dir', mode: 0o755 }]]);
  private ignore: Dockerignore = parseDockerignore('');

  static async read(body: AsyncIterable<Buffer>): Promise<BuildContext> {
    const ctx = new BuildContext();
    let total = 0;
    const links: [string, string][] = [];
    try {
      for await (const { header: h, body: data } of readTar(body)) {
        if (h.path === '') continue;
        if (h.name.split('/').includes('..')) throw invalid(`the build context has a name with ..: ${h.name}`, 'send a tar of the build directory');
        ctx.addParents(h.path);
        if (h.type === 'dir') ctx.nodes.set(h.path, { type: 'dir', mode: h.mode });
        else if (h.type === 'symlink') ctx.nodes.set(h.path, { type: 'symlink', mode: 0o777, linkname: h.linkname });
        else if (h.type === 'hardlink') links.push([h.path, h.linkname.split('/').filter((s) => s && s !== '.').join('/')]);
        else if (h.type === 'file') {
          total += h.size;
          if (total > MAX_CONTEXT_BYTES) {
            throw new ShellbaseError('payload_too_large', `the build context is larger than ${MAX_CONTEXT_BYTES >> 20} MiB`, { hint: 'leave large files out with .dockerignore' });
          }
          const chunks: Buffer[] = [];
          for await (const c of data) chunks.push(c);
          ctx.nodes.set(h.path, { type: 'file', mode: h.mode, data: Buffer.concat(chunks) });
        }
      }
    } catch (e) {
      if (e instanceof ShellbaseError) throw e;
      throw invalid(`the build context is not a tar archive: ${(e as Error).message}`, 'send the build directory as a tar');
    }
    for (const [to, from] of links) {
      const src = ctx.nodes.get(from);
      if (src?.type === 'file') ctx.nodes.set(to, src);
    }
    const ignore = ctx.nodes.get('.dockerignore');
    if (ignore?.type === 'file') ctx.ignore = parseDockerignore(ignore.data!.toString('utf8'));
    return ctx;
  }

  private addParents(p: string): void {
    const parts = p.split('/');
    for (let i = 1; i < parts.length; i++) {
      const dir = parts.slice(0, i).join('/');
      if (!this.nodes.has(dir)) this.nodes.set(dir, { type: 'dir', mode: 0o755 });
    }
  }

  /** A file the build itself reads (the Dockerfile), ignored or not. */
  file(rel: string): Buffer | null {
    const n = this.nodes.get(rel.split('/').filter((s) => s && s !== '.').join('/'));
    return n?.type === 'file' ? n.data! : null;
  }

  stat(rel: string): { type: 'file' | 'dir' | 'symlink'; mode: number } | null {
    if (rel !== '' && this.ignore.ignores(rel)) return null;
    const n = this.nodes.get(rel);
    return n ? { type: n.type, mode: n.mode } : null;
  }

  list(rel: string): string[] {
    const prefix = rel === '' ? '' : `${rel}/`;
    const out: string[] = [];
    for (const p of this.nodes.keys()) {
      if (p === '' || !p.startsWith(prefix)) continue;
      const rest = p.slice(prefix.length);
      if (!rest.includes('/') && !this.ignore.ignores(p)) out.push(rest);
    }
    return out.sort();
  }

  read(rel: string): Buffer { return this.nodes.get(rel)!.data!; }
  readlink(rel: string): string { return this.nodes.get(rel)!.linkname!; }
}

/** A version's tree as a COPY --from source (symlinks inside it are copied as symlinks). */
export function versionTree(view: VersionView): SourceTree {
  const at = (rel: string): Entry | null => view.find(rel === '' ? [] : rel.split('/'), false);
  return {
    stat: (rel) => {
      const e = at(rel);
      return e && (e.type === 'file' || e.type === 'dir' || e.type === 'symlink') ? { type: e.type, mode: e.stat.mode & 0o7777 } : null;
    },
    list: (rel) => view.list(at(rel)!).map((e) => e.segments[e.segments.length - 1]).sort(),
    read: (rel) => view.readAll(at(rel)!),
    readlink: (rel) => { const e = at(rel)!; return view.layers[e.at.layer].readlink(e.at.rel); },
  };
}

const segmentsOf = (p: string) => p.split('/').filter((s) => s !== '' && s !== '.');

/** A source pattern's segment as a RegExp (`*`, `?`, `[…]`), or null when it has none. */
function globOf(segment: string): RegExp | null {
  if (!/[*?[]/.test(segment)) return null;
  const re = segment.replace(/[.+^${}()|\\]/g, '\\$&').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]');
  return new RegExp(`^${re}$`);
}

/** The context paths a COPY source names (wildcards expanded, sorted); [] when none exist. */
function matchSources(tree: SourceTree, pattern: string, line: number): string[] {
  const parts = segmentsOf(pattern);
  if (parts.includes('..')) throw syntaxError(line, `${pattern} leaves the build context`, 'name paths inside the build context');
  let found = [''];
  for (const part of parts) {
    const glob = globOf(part);
    const next: string[] = [];
    for (const dir of found) {
      const path = (name: string) => (dir ? `${dir}/${name}` : name);
      if (glob) {
        if (tree.stat(dir)?.type === 'dir') next.push(...tree.list(dir).filter((n) => glob.test(n)).map(path));
      } else if (tree.stat(path(part))) next.push(path(part));
    }
    found = next;
  }
  return found;
}

/** Everything below `rel` (itself included) as entries placed under `dest`. */
function walk(tree: SourceTree, rel: string, dest: string[], owner: { uid: number; gid: number } | null, chmod: number | null, out: CopyEntry[]): void {
  const st = tree.stat(rel)!;
  const own = owner ?? { uid: 0, gid: 0 };
  const mode = chmod ?? st.mode;
  if (st.type === 'file') out.push({ segments: dest, type: 'file', mode, ...own, data: tree.read(rel) });
  else if (st.type === 'symlink') out.push({ segments: dest, type: 'symlink', mode: 0o777, ...own, linkname: tree.readlink(rel) });
  else {
    if (dest.length > 0) out.push({ segments: dest, type: 'dir', mode, ...own });
    for (const name of tree.list(rel)) walk(tree, rel ? `${rel}/${name}` : name, [...dest, name], owner, chmod, out);
  }
}

export interface CopyOptions {
  sources: string[];
  dest: string;
  /** The stage's working directory (a relative dest is below it). */
  cwd: string;
  owner: { uid: number; gid: number } | null;
  chmod: number | null;
  line: number;
}

/**
 * What a COPY writes, as Docker does: a directory source copies its contents;
 * a file goes to `dest/NAME` when dest ends in `/` (or there are several
 * sources), else to dest itself. A source that matches nothing is an error.
 */
export function copyEntries(tree: SourceTree, o: CopyOptions): CopyEntry[] {
  const destAbs = o.dest.startsWith('/') ? o.dest : `${o.cwd.replace(/\/$/, '')}/${o.dest}`;
  const dest = segmentsOf(destAbs);
  if (dest.includes('..')) throw syntaxError(o.line, `the destination ${o.dest} has ..`, 'name the destination without ..');
  const matched = o.sources.flatMap((s) => {
    const m = matchSources(tree, s, o.line);
    if (m.length === 0) throw syntaxError(o.line, `${s}: no such file or directory in the copy's source`, 'check the path (and the .dockerignore)');
    return m;
  });
  const intoDir = o.dest.endsWith('/') || o.dest === '.' || matched.length > 1 || o.sources.some((s) => globOf(s) !== null);
  const out: CopyEntry[] = [];
  for (const rel of matched) {
    const st = tree.stat(rel)!;
    if (st.type === 'dir') walk(tree, rel, dest, o.owner, o.chmod, out);
    else walk(tree, rel, intoDir ? [...dest, rel.split('/').pop()!] : dest, o.owner, o.chmod, out);
  }
  return out;
}

/** What a COPY's cache key sees of its entries: paths, types, owners, modes and contents (times are not part of it). */
export function digestEntries(entries: CopyEntry[]): string {
  const h = createHash('sha256');
  for (const e of entries) {
    h.update(JSON.stringify([e.segments, e.type, e.mode, e.uid, e.gid, e.linkname ?? null]));
    if (e.data) h.update(createHash('sha256').update(e.data).digest('hex'));
    h.update('\n');
  }
  return h.digest('hex');
}

/** A sandbox's ids as the store keeps them. */
export const hostIds = (e: { uid: number; gid: number }) => ({ uid: SANDBOX_ROOT + e.uid, gid: SANDBOX_ROOT + e.gid });

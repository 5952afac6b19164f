import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import { parseDockerignore } from '@shellbase/protocol';

/** An entry of a build context as a build sees it: its relative path, type and mode (and a symlink's target). */
export interface ContextEntry {
  path: string;
  type: 'file' | 'dir' | 'symlink';
  mode: number;
  target?: string;
}

/**
 * What a directory sends as a build context: every regular file, directory and symlink that its
 * `.dockerignore` keeps (a directory it leaves out whole is not entered; the Dockerfile and the
 * `.dockerignore` itself always go), sorted by path. The same selection as the SDK's `contextOf`.
 */
export function contextEntries(dir: string, dockerfile = 'Dockerfile'): ContextEntry[] {
  const file = path.join(dir, '.dockerignore');
  const ignore = parseDockerignore(existsSync(file) ? readFileSync(file, 'utf8') : '');
  const always = new Set([dockerfile, '.dockerignore']);
  const out: ContextEntry[] = [];
  const walk = (rel: string) => {
    for (const name of readdirSync(path.join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(path.join(dir, r));
      const mode = st.mode & 0o7777;
      if (st.isDirectory()) {
        if (!always.has(r) && ignore.prunes(r)) continue;
        out.push({ path: r, type: 'dir', mode });
        walk(r);
      } else if (always.has(r) || !ignore.ignores(r)) {
        if (st.isSymbolicLink()) out.push({ path: r, type: 'symlink', mode, target: readlinkSync(path.join(dir, r)) });
        else if (st.isFile()) out.push({ path: r, type: 'file', mode });
      }
    }
  };
  walk('');
  return out;
}

/**
 * A digest of a build context: every entry's path, type and mode, each file's bytes and each
 * symlink's target (times are not part of it, as they are not of COPY's cache key). It changes
 * exactly when what the build would copy changes: a Dockerfile image's tag is made of it.
 */
export function contextDigest(dir: string, dockerfile = 'Dockerfile'): string {
  const h = createHash('sha256');
  for (const e of contextEntries(dir, dockerfile)) {
    h.update(`${e.type} ${e.mode.toString(8)} ${e.path}\0`);
    if (e.type === 'symlink') h.update(`${e.target}\0`);
    if (e.type === 'file') {
      const data = readFileSync(path.join(dir, e.path));
      h.update(`${data.length}\0`).update(data);
    }
  }
  return h.digest('hex');
}

import { lstatSync, readdirSync, readlinkSync, type Stats } from 'node:fs';
import path from 'node:path';
import type { FileType } from '@shellbase/protocol';
import { ShellbaseError, invalid } from '../../errors.js';
import type { ViewLayer } from '../../store/layers/types.js';
import { joinPath } from './paths.js';

/** Symlinks followed in one resolution before giving up (as Linux's ELOOP). */
export const MAX_SYMLINK_HOPS = 40;

/** The wire's file types (protocol FileType). */
export type EntryType = FileType;


interface DirPart { layer: number; rel: string }

/** One entry of a version's merged tree, as found in the topmost layer that has it. */
export interface Entry {
  /** Canonical segments inside the context (no symlink above it, no `..`). */
  segments: string[];
  type: EntryType;
  /** The entry's file in the topmost layer holding it. */
  hostPath: string;
  stat: Stats;
  /** For directories: the layer directories that merge into it, top first. */
  parts: DirPart[];
}

const isWhiteout = (st: Stats) => st.isCharacterDevice() && st.rdev === 0;
const typeOf = (st: Stats): EntryType =>
  st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink' : 'other';

function lstatOrNull(p: string): Stats | null {
  try { return lstatSync(p); } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    // A tree deeper than the host's PATH_MAX below the layer, or a symlink to an over-long name.
    if (code === 'ENAMETOOLONG') throw invalid('the path resolves to a name or depth the files API cannot reach', 'read it with a query (exec) instead');
    throw e;
  }
}

/**
 * A read-only view of one version's tree, read straight from its layers with
 * overlayfs' rules: a whiteout hides what is below it, a non-directory hides
 * everything below, directories merge unless opaque. Paths resolve with the
 * context root as `/`: `..` stops at the root and symlinks, absolute or
 * relative, resolve inside the context. Host paths are only ever built from
 * plain names below directories, so nothing outside the layers is reached.
 */
export class VersionView {
  private readonly root: Entry;

  /** `layers` top first. */
  constructor(private readonly layers: ViewLayer[]) {
    this.root = {
      segments: [], type: 'dir', hostPath: layers[0].root, stat: lstatSync(layers[0].root),
      parts: layers.map((_, i) => ({ layer: i, rel: '' })),
    };
  }

  /** The child `name` of a directory entry, or null. */
  child(dir: Entry, name: string): Entry | null {
    const parts: DirPart[] = [];
    let found: { hostPath: string; stat: Stats } | null = null;
    for (const part of dir.parts) {
      const rel = part.rel ? `${part.rel}/${name}` : name;
      const hostPath = path.join(this.layers[part.layer].root, rel);
      const st = lstatOrNull(hostPath);
      if (!st) continue;
      if (isWhiteout(st)) break;
      if (!found) found = { hostPath, stat: st };
      if (!st.isDirectory()) break;
      parts.push({ layer: part.layer, rel });
      if (this.layers[part.layer].opaque.has(rel)) break;
    }
    if (!found) return null;
    if (!found.stat.isDirectory()) parts.length = 0;
    return { segments: [...dir.segments, name], type: typeOf(found.stat), hostPath: found.hostPath, stat: found.stat, parts };
  }

  /**
   * Resolves segments from the root. Symlinks on the way are always followed;
   * the last one only with `followLast`. Null when something does not exist.
   */
  resolve(segments: readonly string[], followLast = true): Entry | null {
    let hops = 0;
    const stack: Entry[] = [this.root];
    const todo = [...segments];
    while (todo.length > 0) {
      const name = todo.shift()!;
      if (name === '..') { if (stack.length > 1) stack.pop(); continue; }
      if (name === '.' || name === '') continue;
      const cur = stack[stack.length - 1];
      if (cur.type !== 'dir') throw notADirectory(cur.segments);
      const next = this.child(cur, name);
      if (!next) return null;
      if (next.type === 'symlink' && (todo.length > 0 || followLast)) {
        if (++hops > MAX_SYMLINK_HOPS) {
          throw new ShellbaseError('invalid_argument', `too many levels of symbolic links at ${joinPath(next.segments)}`, {
            hint: 'the path runs through a symlink loop', details: { path: joinPath(next.segments) },
          });
        }
        const target = readlinkSync(next.hostPath);
        if (target.startsWith('/')) stack.splice(1);
        todo.unshift(...target.split('/'));
        continue;
      }
      stack.push(next);
    }
    return stack[stack.length - 1];
  }

  /** As `resolve`, but null where the path cannot be resolved at all (a loop, a file used as a directory). */
  find(segments: readonly string[], followLast = true): Entry | null {
    try { return this.resolve(segments, followLast); } catch (e) {
      if (e instanceof ShellbaseError && e.code === 'invalid_argument') return null;
      throw e;
    }
  }

  /** Entries of a directory: the union of its layers, the topmost entry winning, whiteouts hiding. */
  list(dir: Entry): Entry[] {
    const seen = new Set<string>();
    const out: Entry[] = [];
    for (const part of dir.parts) {
      let names: string[];
      try { names = readdirSync(path.join(this.layers[part.layer].root, part.rel)); } catch { continue; }
      for (const name of names) {
        if (seen.has(name)) continue;
        seen.add(name);
        const e = this.child(dir, name);
        if (e) out.push(e);
      }
    }
    return out.sort((a, b) => (a.segments[a.segments.length - 1] < b.segments[b.segments.length - 1] ? -1 : 1));
  }
}

export function notADirectory(segments: readonly string[]): ShellbaseError {
  return new ShellbaseError('invalid_argument', `${joinPath(segments)} is not a directory`, {
    hint: 'a path can only continue below a directory', details: { path: joinPath(segments) },
  });
}

import type { Readable } from 'node:stream';
import type { FileType } from '@shellbase/protocol';
import { ShellbaseError, invalid } from '../../errors.js';
import type { LayerReader, LayerStat } from '../../store/snapshotter/types.js';
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
  stat: LayerStat;
  /** Where its topmost copy is: a layer of the view (an index) and a path in it. */
  at: DirPart;
  /** For directories: the layer directories that merge into it, top first. */
  parts: DirPart[];
}

const typeOf = (st: LayerStat): EntryType => (st.kind === 'whiteout' ? 'other' : st.kind);

function statOrNull(reader: LayerReader, rel: string): LayerStat | null {
  try { return reader.stat(rel); } catch (e) {
    // A tree deeper than the host's PATH_MAX below the layer, or a symlink to an over-long name.
    if ((e as NodeJS.ErrnoException).code === 'ENAMETOOLONG') throw invalid('the path resolves to a name or depth the files API cannot reach', 'read it with a query (exec) instead');
    throw e;
  }
}

/**
 * A read-only view of one version's tree, read straight from its layers with
 * overlayfs' rules: a whiteout hides what is below it, a non-directory hides
 * everything below, directories merge unless opaque. Paths resolve with the
 * context root as `/`: `..` stops at the root and symlinks, absolute or
 * relative, resolve inside the context. Layers are read through the
 * snapshotter's readers, by plain names below directories.
 */
export class VersionView {
  private readonly root: Entry;

  /** `layers` top first. */
  constructor(readonly layers: LayerReader[]) {
    this.root = {
      segments: [], type: 'dir', stat: layers[0].stat('')!, at: { layer: 0, rel: '' },
      parts: layers.map((_, i) => ({ layer: i, rel: '' })),
    };
  }

  /** The child `name` of a directory entry, or null. */
  child(dir: Entry, name: string): Entry | null {
    const parts: DirPart[] = [];
    let found: { at: DirPart; stat: LayerStat } | null = null;
    for (const part of dir.parts) {
      const rel = part.rel ? `${part.rel}/${name}` : name;
      const st = statOrNull(this.layers[part.layer], rel);
      if (!st) continue;
      if (st.kind === 'whiteout') break;
      if (!found) found = { at: { layer: part.layer, rel }, stat: st };
      if (st.kind !== 'dir') break;
      parts.push({ layer: part.layer, rel });
      if (this.layers[part.layer].opaque.has(rel)) break;
    }
    if (!found) return null;
    if (found.stat.kind !== 'dir') parts.length = 0;
    return { segments: [...dir.segments, name], type: typeOf(found.stat), stat: found.stat, at: found.at, parts };
  }

  /** A symlink's target. */
  readlink(e: Entry): string { return this.layers[e.at.layer].readlink(e.at.rel); }
  /** A file's bytes whole. */
  readAll(e: Entry): Buffer { return this.layers[e.at.layer].readAll(e.at.rel); }
  /** A file's bytes as a stream (from `start` to `end` inclusive). */
  stream(e: Entry, range?: { start: number; end: number }): Readable { return this.layers[e.at.layer].stream(e.at.rel, range); }
  /** The reader and path of an entry's topmost copy (for a writer's copyFile). */
  source(e: Entry): { reader: LayerReader; rel: string } { return { reader: this.layers[e.at.layer], rel: e.at.rel }; }
  /** Whether two entries are one stored copy (same layer, same path): equal without reading them. */
  static same(a: Entry, b: Entry, va: VersionView, vb: VersionView): boolean {
    return va.layers[a.at.layer].layerId === vb.layers[b.at.layer].layerId && a.at.rel === b.at.rel;
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
        const target = this.readlink(next);
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
      for (const name of this.layers[part.layer].list(part.rel)) {
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

import type { Readable } from 'node:stream';
import { ShellbaseError, invalid } from '../../errors.js';
import type { EntryAttrs, ScratchWriter } from '../../store/snapshotter/types.js';
import { SANDBOX_ROOT } from '../../util/idmap.js';
import { notADirectory, type Entry, type VersionView } from './view.js';

/** Where a new entry goes: the deepest existing directory on its path, and what must be made below it. */
export interface Placement {
  /** Existing directories from the root down (root excluded), canonical. */
  ancestors: Entry[];
  /** Directories to create below the last ancestor. */
  missing: string[];
  name: string;
}

/**
 * The directories from the root down to `segments` (root excluded), each
 * resolved without following it; null if one is missing or not a directory.
 * Canonical segments (no symlinks, no `..`) resolve to themselves.
 */
export function ancestorsOf(view: VersionView, segments: readonly string[]): Entry[] | null {
  const out: Entry[] = [];
  for (let j = 1; j <= segments.length; j++) {
    const e = view.find(segments.slice(0, j), false);
    if (!e || e.type !== 'dir') return null;
    out.push(e);
  }
  return out;
}

/** Finds where `segments` would be created, following symlinks on the way as the kernel would. */
export function place(view: VersionView, segments: readonly string[]): Placement {
  if (segments.length === 0) throw invalid('the root cannot be written', 'name a file below /');
  const name = segments[segments.length - 1];
  if (name === '..') throw invalid('a path cannot end in ..', 'name the file itself');
  const parent = segments.slice(0, -1);
  // The longest existing prefix, resolved; what follows must not exist yet.
  for (let i = parent.length; i >= 0; i--) {
    const dir = view.resolve(parent.slice(0, i));
    if (!dir) continue;
    if (dir.type !== 'dir') throw notADirectory(dir.segments);
    const missing = parent.slice(i);
    if (missing.includes('..')) throw invalid('.. below a directory that does not exist', 'create the directory first');
    return { ancestors: ancestorsOf(view, dir.segments)!, missing, name };
  }
  throw new Error('unreachable: the root always exists');
}

/** An entry's owner, mode and times, to make its like in a layer. */
export const attrsOf = (e: Entry): EntryAttrs => ({ mode: e.stat.mode, uid: e.stat.uid, gid: e.stat.gid, atimeMs: e.stat.atimeMs, mtimeMs: e.stat.mtimeMs });

/** What new entries a writer makes belong to: the sandboxes' root. */
export const NEW_ENTRY = (mode: number): EntryAttrs => ({ mode, uid: SANDBOX_ROOT, gid: SANDBOX_ROOT });

/**
 * Creates the placement's directories in a layer: existing ones keep their
 * owner, mode and times; new ones belong to the sandboxes' root. Returns the
 * relative path of the last one.
 */
export function makeParents(w: ScratchWriter, p: Placement): string {
  let rel = '';
  for (const a of p.ancestors) {
    rel = rel ? `${rel}/${a.segments[a.segments.length - 1]}` : a.segments[a.segments.length - 1];
    w.mkdir(rel, attrsOf(a));
  }
  for (const m of p.missing) {
    rel = rel ? `${rel}/${m}` : m;
    w.mkdir(rel, NEW_ENTRY(0o755));
  }
  return rel;
}

export const under = (dir: string, name: string) => (dir ? `${dir}/${name}` : name);

/** An owner as a sandbox sees it (ids inside). */
export interface Owner { uid: number; gid: number }

/** Ids a sandbox has (its user namespace maps 0–65535). */
const MAX_SANDBOX_ID = 65_535;

/**
 * A new entry's attributes: the sandboxes' root's, or `owner`'s (ids shifted as layers store them).
 * An id a sandbox does not have, or a mode past 07777, is refused.
 */
export function owned(mode: number, owner?: Owner): EntryAttrs {
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw invalid(`mode ${mode} is not a file mode`, 'pass permission bits (at most 07777)');
  for (const [name, id] of owner ? [['uid', owner.uid], ['gid', owner.gid]] as const : []) {
    if (!Number.isInteger(id) || id < 0 || id > MAX_SANDBOX_ID) throw invalid(`${name} ${id} is not an id of a sandbox`, `pass an id from 0 to ${MAX_SANDBOX_ID}`, { [name]: id });
  }
  return owner ? { mode, uid: SANDBOX_ROOT + owner.uid, gid: SANDBOX_ROOT + owner.gid } : NEW_ENTRY(mode);
}

/** Writes a file (owned by the sandboxes' root) into a layer from a stream; a full disk limit is a 413. */
export async function writeFile(w: ScratchWriter, p: Placement, body: Readable, mode: number, owner?: Owner): Promise<void> {
  const rel = under(makeParents(w, p), p.name);
  try {
    await w.writeFile(rel, body, owned(mode, owner));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EDQUOT' || (e as NodeJS.ErrnoException).code === 'ENOSPC') {
      throw new ShellbaseError('payload_too_large', 'the file is larger than the disk limit', { hint: 'write less than limits.diskMb' });
    }
    throw e;
  }
}

/** Puts a whiteout for `entry` into a layer. */
export async function whiteout(w: ScratchWriter, entry: Entry, view: VersionView): Promise<void> {
  const parent = entry.segments.slice(0, -1);
  const p: Placement = { ancestors: ancestorsOf(view, parent)!, missing: [], name: entry.segments[entry.segments.length - 1] };
  await w.whiteout(under(makeParents(w, p), p.name));
}

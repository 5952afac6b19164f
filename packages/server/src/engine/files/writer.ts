import { chownSync, createWriteStream, mkdirSync, utimesSync, chmodSync } from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { ShellbaseError, invalid } from '../../errors.js';
import { SANDBOX_ROOT } from '../../util/idmap.js';
import { runOk } from '../../util/proc.js';
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

/**
 * Creates the placement's directories in a layer tree: existing ones keep
 * their owner, mode and times; new ones belong to the sandboxes' root.
 */
export function makeParents(tree: string, p: Placement): string {
  let dir = tree;
  for (const a of p.ancestors) {
    dir = path.join(dir, a.segments[a.segments.length - 1]);
    mkdirSync(dir, { recursive: true });
    chownSync(dir, a.stat.uid, a.stat.gid);
    chmodSync(dir, a.stat.mode & 0o7777);
    utimesSync(dir, a.stat.atime, a.stat.mtime);
  }
  for (const m of p.missing) {
    dir = path.join(dir, m);
    mkdirSync(dir, { mode: 0o755, recursive: true });
    chownSync(dir, SANDBOX_ROOT, SANDBOX_ROOT);
  }
  return dir;
}

/** Writes a file (owned by the sandboxes' root) into a layer tree from a stream; a full disk limit is a 413. */
export async function writeFile(tree: string, p: Placement, body: Readable, mode: number): Promise<string> {
  const file = path.join(makeParents(tree, p), p.name);
  try {
    await pipeline(body, createWriteStream(file, { mode }));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EDQUOT' || (e as NodeJS.ErrnoException).code === 'ENOSPC') {
      throw new ShellbaseError('payload_too_large', 'the file is larger than the disk limit', { hint: 'write less than limits.diskMb' });
    }
    throw e;
  }
  chownSync(file, SANDBOX_ROOT, SANDBOX_ROOT);
  chmodSync(file, mode);
  return file;
}

/** Puts a whiteout (a 0/0 character device) for `entry` into a layer tree. */
export async function whiteout(tree: string, entry: Entry, view: VersionView): Promise<void> {
  const parent = entry.segments.slice(0, -1);
  const p: Placement = {
    ancestors: ancestorsOf(view, parent)!,
    missing: [], name: entry.segments[entry.segments.length - 1],
  };
  const file = path.join(makeParents(tree, p), p.name);
  await runOk('mknod', [file, 'c', '0', '0']);
}

import { readlinkSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { ShellbaseError } from '../../errors.js';
import type { MetadataStore, VersionRow } from '../../store/metadata/types.js';
import { run } from '../../util/proc.js';
import { changesBetween } from '../lineage.js';
import type { DiffChange } from '@shellbase/protocol';
import type { Entry, VersionView } from '../files/view.js';
import { parsePath } from '../files/paths.js';

const lookup = (view: VersionView, path: string): Entry | null => view.find(parsePath(path), false);

/** Compares two files of the same size chunk by chunk. */
async function sameBytes(a: string, b: string, size: number): Promise<boolean> {
  const [fa, fb] = await Promise.all([open(a, 'r'), open(b, 'r')]);
  try {
    const ba = Buffer.alloc(1 << 16);
    const bb = Buffer.alloc(1 << 16);
    for (let pos = 0; pos < size; pos += ba.length) {
      const [ra, rb] = await Promise.all([fa.read(ba, 0, ba.length, pos), fb.read(bb, 0, bb.length, pos)]);
      if (ra.bytesRead !== rb.bytesRead || !ba.subarray(0, ra.bytesRead).equals(bb.subarray(0, rb.bytesRead))) return false;
      if (ra.bytesRead === 0) break;
    }
    return true;
  } finally {
    await Promise.all([fa.close(), fb.close()]);
  }
}

async function modified(a: Entry, b: Entry): Promise<boolean> {
  if (a.type !== b.type || (a.stat.mode & 0o7777) !== (b.stat.mode & 0o7777) || a.stat.uid !== b.stat.uid || a.stat.gid !== b.stat.gid) return true;
  if (a.hostPath === b.hostPath) return false;
  switch (a.type) {
    case 'file': return a.stat.size !== b.stat.size || !(await sameBytes(a.hostPath, b.hostPath, a.stat.size));
    case 'symlink': return readlinkSync(a.hostPath) !== readlinkSync(b.hostPath);
    case 'dir': return false; // a directory's changes show as changes of its entries
    default: return a.stat.rdev !== b.stat.rdev;
  }
}

/**
 * Whether a path differs between two views (present in one only, or changed).
 * Directories always count as differing: what lies below them decides.
 */
export async function differsAt(views: [VersionView, VersionView], path: string): Promise<boolean> {
  const a = lookup(views[0], path);
  const b = lookup(views[1], path);
  if (!a || !b) return a !== b;
  return a.type === 'dir' || b.type === 'dir' || modified(a, b);
}

const describe = (e: Entry, path: string, kind: DiffChange['kind']): DiffChange =>
  ({ path, kind, type: e.type, ...(e.type === 'file' ? { size: e.stat.size } : {}) });

/**
 * What differs between two versions. Only the paths changed on the way from
 * their common ancestor to either are looked at, so the cost follows the size
 * of the change, not of the image.
 */
export async function diffVersions(md: MetadataStore, from: VersionRow, to: VersionRow, views: [VersionView, VersionView], only?: string): Promise<DiffChange[]> {
  const candidates = await changesBetween(md, from, to);
  if (candidates === null) {
    throw new ShellbaseError('failed_precondition', 'the two versions share no ancestor', { hint: 'diff versions of one lineage (forks included)' });
  }
  const [va, vb] = views;
  const paths = only !== undefined ? [only] : candidates.map(([p]) => p).sort();
  const out: DiffChange[] = [];
  const deletedDirs: string[] = [];
  for (const p of paths) {
    if (deletedDirs.some((d) => p.startsWith(`${d}/`))) continue;
    const a = lookup(va, p);
    const b = lookup(vb, p);
    if (!a && !b) continue;
    if (!a) out.push(describe(b!, p, 'added'));
    else if (!b) {
      out.push(describe(a, p, 'deleted'));
      if (a.type === 'dir') { deletedDirs.push(p); out.push(...walk(va, a, p).map(([q, e]) => describe(e, q, 'deleted'))); }
    } else if (await modified(a, b)) out.push(describe(b, p, 'modified'));
  }
  return out;
}

function walk(view: VersionView, dir: Entry, path: string): [string, Entry][] {
  const out: [string, Entry][] = [];
  for (const e of view.list(dir)) {
    const p = `${path}/${e.segments[e.segments.length - 1]}`;
    out.push([p, e]);
    if (e.type === 'dir') out.push(...walk(view, e, p));
  }
  return out;
}

/** A unified diff of one text file between two views (`diff -u`). */
export async function unifiedDiff(views: [VersionView, VersionView], path: string): Promise<string> {
  const files = views.map((v) => {
    const e = v.find(parsePath(path));
    if (e && e.type !== 'file') {
      throw new ShellbaseError('invalid_argument', `${path} is not a regular file in both versions`, { hint: 'pass ?path= of a file' });
    }
    return e ? e.hostPath : '/dev/null';
  });
  const r = await run('diff', ['-u', '--label', `a${path}`, '--label', `b${path}`, files[0], files[1]]);
  if (r.code === 2) throw new ShellbaseError('invalid_argument', `cannot diff ${path}: ${r.stderr.trim()}`);
  const text = r.stdout.toString('utf8');
  return text.startsWith('Binary files') ? '' : text;
}

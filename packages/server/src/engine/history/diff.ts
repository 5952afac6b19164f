import type { Readable } from 'node:stream';
import { structuredPatch } from 'diff';
import { ShellbaseError } from '../../errors.js';
import type { MetadataStore, VersionRow } from '../../store/metadata/types.js';
import { changesBetween } from '../lineage.js';
import type { DiffChange } from '@shellbase/protocol';
import { VersionView, type Entry } from '../files/view.js';
import { parsePath } from '../files/paths.js';

const lookup = (view: VersionView, path: string): Entry | null => view.find(parsePath(path), false);

/** Files up to this size are compared in one read each. */
const SMALL_FILE = 64 * 1024;

/** The largest file a unified diff reads (both sides are held in memory). */
const MAX_PATCH_BYTES = 64 << 20;

/** Compares two files' bytes, stream against stream. */
async function sameBytes(a: Readable, b: Readable): Promise<boolean> {
  const ia = a[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const ib = b[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  let ca: Buffer = Buffer.alloc(0);
  let cb: Buffer = Buffer.alloc(0);
  let doneA = false;
  let doneB = false;
  try {
    for (;;) {
      if (ca.length === 0 && !doneA) { const r = await ia.next(); if (r.done) doneA = true; else ca = r.value; continue; }
      if (cb.length === 0 && !doneB) { const r = await ib.next(); if (r.done) doneB = true; else cb = r.value; continue; }
      // Here an empty side has ended: equal only if both have.
      if (ca.length === 0 || cb.length === 0) return ca.length === 0 && cb.length === 0;
      const n = Math.min(ca.length, cb.length);
      if (!ca.subarray(0, n).equals(cb.subarray(0, n))) return false;
      ca = ca.subarray(n);
      cb = cb.subarray(n);
    }
  } finally {
    a.destroy();
    b.destroy();
  }
}

async function modified(a: Entry, b: Entry, va: VersionView, vb: VersionView): Promise<boolean> {
  if (a.type !== b.type || a.stat.mode !== b.stat.mode || a.stat.uid !== b.stat.uid || a.stat.gid !== b.stat.gid) return true;
  if (VersionView.same(a, b, va, vb)) return false;
  switch (a.type) {
    case 'file':
      if (a.stat.size !== b.stat.size) return true;
      // Small files in one read each (no stream set-up); large ones compared as they stream.
      return a.stat.size <= SMALL_FILE ? !va.readAll(a).equals(vb.readAll(b)) : !(await sameBytes(va.stream(a), vb.stream(b)));
    case 'symlink': return va.readlink(a) !== vb.readlink(b);
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
  return a.type === 'dir' || b.type === 'dir' || modified(a, b, views[0], views[1]);
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
    } else if (await modified(a, b, va, vb)) out.push(describe(b, p, 'modified'));
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

/** A unified diff of one text file between two views, as `diff -u` prints it ('' for binary files). */
export async function unifiedDiff(views: [VersionView, VersionView], path: string): Promise<string> {
  const texts: Buffer[] = views.map((v) => {
    const e = v.find(parsePath(path));
    if (e && e.type !== 'file') {
      throw new ShellbaseError('invalid_argument', `${path} is not a regular file in both versions`, { hint: 'pass ?path= of a file' });
    }
    if (e && e.stat.size > MAX_PATCH_BYTES) {
      throw new ShellbaseError('invalid_argument', `${path} is larger than ${MAX_PATCH_BYTES} bytes: too large for a unified diff`, { hint: 'compare it with a query (diff, cmp) instead' });
    }
    return e ? v.readAll(e) : Buffer.alloc(0);
  });
  if (texts.some((t) => t.subarray(0, 8192).includes(0))) return '';
  const [a, b] = texts.map((t) => t.toString('utf8'));
  if (a === b) return '';
  const patch = structuredPatch(`a${path}`, `b${path}`, a, b, '', '', { context: 3 });
  const range = (start: number, lines: number) => (lines === 1 ? `${start}` : `${lines === 0 ? start - 1 : start},${lines}`);
  const out = [`--- a${path}`, `+++ b${path}`];
  for (const h of patch.hunks) {
    out.push(`@@ -${range(h.oldStart, h.oldLines)} +${range(h.newStart, h.newLines)} @@`, ...h.lines);
  }
  return `${out.join('\n')}\n`;
}

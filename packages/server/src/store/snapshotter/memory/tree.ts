import type { Change, ChangeType, EntryAttrs, LayerStat } from '../types.js';

/** One entry of an in-memory tree (the fake snapshotter's layers and scratches). */
export interface Node {
  kind: LayerStat['kind'];
  mode: number;
  uid: number;
  gid: number;
  atimeMs: number;
  mtimeMs: number;
  rdev: number;
  data?: Buffer;
  target?: string;
  children?: Map<string, Node>;
  opaque?: boolean;
}

export const dirNode = (a: Partial<EntryAttrs> = {}): Node => ({
  kind: 'dir', mode: a.mode ?? 0o755, uid: a.uid ?? 0, gid: a.gid ?? 0, atimeMs: a.atimeMs ?? Date.now(), mtimeMs: a.mtimeMs ?? Date.now(), rdev: 0,
  children: new Map(),
});

export const fileNode = (data: Buffer, a: Partial<EntryAttrs> = {}): Node => ({
  kind: 'file', mode: a.mode ?? 0o644, uid: a.uid ?? 0, gid: a.gid ?? 0, atimeMs: a.atimeMs ?? Date.now(), mtimeMs: a.mtimeMs ?? Date.now(), rdev: 0, data,
});

export const whiteoutNode = (): Node => ({ kind: 'whiteout', mode: 0, uid: 0, gid: 0, atimeMs: Date.now(), mtimeMs: Date.now(), rdev: 0 });

export const split = (rel: string): string[] => rel.split('/').filter((s) => s !== '' && s !== '.');

/** The node at `rel` (no symlinks followed), or null. */
export function find(root: Node, rel: string): Node | null {
  let n: Node | undefined = root;
  for (const name of split(rel)) {
    if (n.kind !== 'dir') return null;
    n = n.children!.get(name);
    if (!n) return null;
  }
  return n;
}

/** The directory holding `rel`'s last name (made as plain directories where missing) and that name. */
export function parentOf(root: Node, rel: string, make = false): { dir: Node; name: string } {
  const parts = split(rel);
  const name = parts.pop();
  if (name === undefined) throw new Error('the root has no parent');
  let dir = root;
  for (const p of parts) {
    let next = dir.children!.get(p);
    if (!next && make) { next = dirNode(); dir.children!.set(p, next); }
    if (!next || next.kind !== 'dir') throw Object.assign(new Error(`${rel}: not a directory on the way`), { code: 'ENOTDIR' });
    dir = next;
  }
  return { dir, name };
}

export function statOf(n: Node): LayerStat {
  return { kind: n.kind, mode: n.mode & 0o7777, uid: n.uid, gid: n.gid, size: n.kind === 'file' ? n.data!.length : 0, rdev: n.rdev, atimeMs: n.atimeMs, mtimeMs: n.mtimeMs };
}

export function clone(n: Node): Node {
  return { ...n, ...(n.children ? { children: new Map([...n.children].map(([k, v]) => [k, clone(v)])) } : {}) };
}

const typeOf = (n: Node): ChangeType =>
  n.kind === 'file' ? 'f' : n.kind === 'dir' ? (n.opaque ? 'O' : 'd') : n.kind === 'symlink' ? 'l' : n.kind === 'whiteout' ? 'w' : 'o';

/** Every entry below `root` as a layer's change set (sorted), and the bytes of its files. */
export function scan(root: Node): { changes: Change[]; bytes: number } {
  const changes: Change[] = [];
  let bytes = 0;
  const walk = (n: Node, at: string) => {
    for (const [name, c] of n.children ?? []) {
      const p = `${at}/${name}`;
      changes.push([p, typeOf(c)]);
      if (c.kind === 'file') bytes += c.data!.length;
      if (c.kind === 'dir') walk(c, p);
    }
  };
  walk(root, '');
  changes.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return { changes, bytes };
}

/**
 * Applies layer `src` onto `dst` as overlayfs would stack it (the fake's squash, as
 * `sbx-store apply`): plain directories merge, anything else replaces, a directory that
 * replaces something is marked opaque, whiteouts stay whiteouts.
 */
export function applyLayer(src: Node, dst: Node): void {
  for (const [name, s] of src.children ?? []) {
    const d = dst.children!.get(name);
    if (s.kind === 'dir' && !s.opaque && d?.kind === 'dir') {
      applyLayer(s, d);
      Object.assign(d, { mode: s.mode, uid: s.uid, gid: s.gid, atimeMs: s.atimeMs, mtimeMs: s.mtimeMs });
      continue;
    }
    const copy = clone(s);
    if (copy.kind === 'dir' && d) copy.opaque = true;
    dst.children!.set(name, copy);
  }
}

/** The bytes of the files below `n`. */
export function sizeOf(n: Node): number {
  if (n.kind === 'file') return n.data!.length;
  let total = 0;
  for (const c of n.children?.values() ?? []) total += sizeOf(c);
  return total;
}

import { Readable } from 'node:stream';
import { isImageLayer, newImportedLayerId } from '../../layer-ids.js';
import { planWhiteouts } from '../oci-whiteouts.js';
import { newId } from '../../../util/ids.js';
import type { Change, CommittedLayer, EntryAttrs, LayerReader, LayerStat, MountSpec, Scratch, ScratchWriter, Snapshotter } from '../types.js';
import { applyLayer, clone, dirNode, fileNode, find, parentOf, scan, sizeOf, split, statOf, whiteoutNode, type Node } from './tree.js';

const quotaExceeded = () => Object.assign(new Error('Disk quota exceeded'), { code: 'EDQUOT' });

/**
 * A snapshotter in memory, for the fast test tier: it passes the snapshotter's
 * conformance suite, and its mounts are understood only by the in-memory
 * runtime (runtime/memory), which writes into a scratch through `merged()`.
 */
export class MemorySnapshotter implements Snapshotter {
  private readonly layers = new Map<string, { root: Node; opaque: Set<string> }>();
  readonly scratches = new Map<string, { scratch: Scratch; tree: Node; staging: Node }>();

  /** Adds an image: its files as `path → content` (directories are made on the way). */
  addImage(layerId: string, files: Record<string, string>): void {
    if (!isImageLayer(layerId)) throw new Error(`${layerId} is not an image's layer id`);
    const root = dirNode();
    for (const [p, content] of Object.entries(files)) {
      const { dir, name } = parentOf(root, p, true);
      dir.children!.set(name, p.endsWith('/') ? dirNode() : fileNode(Buffer.from(content)));
    }
    this.layers.set(layerId, { root, opaque: new Set() });
  }

  has(layerId: string): boolean { return this.layers.has(layerId); }

  async open(): Promise<void> {}
  async close(): Promise<void> { this.scratches.clear(); }
  async sync(): Promise<void> {}

  async recover(known: (ids: string[]) => Promise<Set<string>>): Promise<{ scratch: number; layers: number }> {
    const scratch = this.scratches.size;
    this.scratches.clear();
    const ids = [...this.layers.keys()].filter((id) => !isImageLayer(id));
    const keep = await known(ids);
    let layers = 0;
    for (const id of ids) if (!keep.has(id)) { this.layers.delete(id); layers++; }
    return { scratch, layers };
  }

  async prepare({ diskMb }: { diskMb: number }): Promise<Scratch> {
    const scratch = { id: newId('s'), diskMb };
    this.scratches.set(scratch.id, { scratch, tree: dirNode(), staging: dirNode() });
    return scratch;
  }

  async mounts(layers: readonly string[], scratch: Scratch): Promise<MountSpec> {
    for (const id of layers) if (!this.layers.has(id)) throw new Error(`no layer ${id}`);
    // Layer ids may hold ':' (images'): the fake's lowers are a JSON list, top first.
    return { chdir: 'memory', lower: JSON.stringify([...layers].reverse()), upper: scratch.id, work: '', merged: '' };
  }

  /** The merged tree a mount describes, for the in-memory runtime, with `above` over its layers (top first). */
  merged(spec: MountSpec, above: readonly Node[] = []): MergedTree {
    const s = this.scratches.get(spec.upper);
    if (!s) throw new Error(`no scratch ${spec.upper}`);
    const lowers = (JSON.parse(spec.lower) as string[]).map((id) => this.layers.get(id)!.root);
    return new MergedTree(s.tree, [...above, ...lowers], s.scratch.diskMb * 2 ** 20);
  }

  /** The layers of `spec` alone, over an upper nothing may be written to (a read-only volume). */
  layersOnly(spec: MountSpec): MergedTree {
    return new MergedTree(dirNode(), (JSON.parse(spec.lower) as string[]).map((id) => this.layers.get(id)!.root), 0);
  }

  private take(scratch: Scratch) {
    const s = this.scratches.get(scratch.id);
    if (!s) throw new Error(`no scratch ${scratch.id}`);
    this.scratches.delete(scratch.id);
    return s;
  }

  async commit(scratch: Scratch): Promise<CommittedLayer | null> {
    const { tree } = this.take(scratch);
    if (tree.children!.size === 0) return null;
    const { changes, bytes } = scan(tree);
    const layerId = newId('l');
    this.layers.set(layerId, { root: tree, opaque: opaqueOf(tree) });
    return { layerId, bytes, changes };
  }

  async commitImport(scratch: Scratch, given?: string): Promise<CommittedLayer> {
    const { tree } = this.take(scratch);
    const plan = planWhiteouts(scan(tree).changes);
    for (const rel of plan.remove) { const { dir, name } = parentOf(tree, rel); dir.children!.delete(name); }
    for (const rel of plan.whiteouts) { const { dir, name } = parentOf(tree, rel); dir.children!.set(name, whiteoutNode()); }
    for (const rel of plan.opaque) { const n = rel ? find(tree, rel) : tree; if (n?.kind === 'dir') n.opaque = true; }
    const { changes, bytes } = scan(tree);
    const layerId = given ?? newImportedLayerId();
    // As a rename onto another layer's tree fails in the btrfs store.
    if (this.layers.has(layerId)) throw Object.assign(new Error(`layer ${layerId} exists`), { code: 'EEXIST' });
    this.layers.set(layerId, { root: tree, opaque: opaqueOf(tree) });
    return { layerId, bytes, changes };
  }

  /** The tree a writer's `tree()` or `staging()` description names, for the in-memory runtime's tar. */
  target(source: string): Node {
    const [kind, id] = source.split(':');
    const s = this.scratches.get(id);
    if (!s || (kind !== 'memory-tree' && kind !== 'memory-staging')) throw new Error(`no scratch tree ${source}`);
    return kind === 'memory-tree' ? s.tree : s.staging;
  }

  async discard(scratch: Scratch): Promise<void> { this.scratches.delete(scratch.id); }

  async release(scratch: Scratch): Promise<number> { return sizeOf(this.take(scratch).tree); }

  async squash(ids: readonly string[]): Promise<{ layerId: string; bytes: number }> {
    const root = dirNode();
    for (const id of ids) {
      if (isImageLayer(id)) throw new Error('squash: image layers are never squashed');
      applyLayer(this.layers.get(id)!.root, root);
    }
    const layerId = newId('l');
    this.layers.set(layerId, { root, opaque: opaqueOf(root) });
    return { layerId, bytes: scan(root).bytes };
  }

  async reader(layerId: string): Promise<LayerReader> {
    const l = this.layers.get(layerId);
    if (!l) throw new Error(`no layer ${layerId}`);
    return new MemReader(layerId, l.root, l.opaque);
  }

  writer(scratch: Scratch): ScratchWriter {
    const s = this.scratches.get(scratch.id);
    if (!s) throw new Error(`no scratch ${scratch.id}`);
    return new MemWriter(scratch.id, s.tree, s.staging, scratch.diskMb * 2 ** 20);
  }

  async remove(layerIds: readonly string[]): Promise<void> {
    for (const id of layerIds) if (!isImageLayer(id)) this.layers.delete(id);
  }
}

function opaqueOf(root: Node): Set<string> {
  const out = new Set<string>();
  const walk = (n: Node, at: string) => {
    for (const [name, c] of n.children ?? []) {
      const p = at ? `${at}/${name}` : name;
      if (c.opaque) out.add(p);
      if (c.kind === 'dir') walk(c, p);
    }
  };
  walk(root, '');
  return out;
}

class MemReader implements LayerReader {
  constructor(readonly layerId: string, private readonly root: Node, readonly opaque: ReadonlySet<string>) {}
  private node(rel: string): Node {
    const n = find(this.root, rel);
    if (!n) throw Object.assign(new Error(`${rel}: no such entry`), { code: 'ENOENT' });
    return n;
  }
  stat(rel: string): LayerStat | null { const n = find(this.root, rel); return n ? statOf(n) : null; }
  list(rel: string): string[] { return [...(find(this.root, rel)?.children?.keys() ?? [])]; }
  readlink(rel: string): string { return this.node(rel).target!; }
  readAll(rel: string): Buffer { return Buffer.from(this.node(rel).data!); }
  stream(rel: string, range?: { start: number; end: number }): Readable {
    const data = this.node(rel).data!;
    return Readable.from([range ? data.subarray(range.start, range.end + 1) : data]);
  }
}

class MemWriter implements ScratchWriter {
  constructor(private readonly id: string, private readonly root: Node, private readonly stagingTree: Node, private readonly limit: number) {}

  private put(rel: string, n: Node): void {
    if (n.kind === 'file' && sizeOf(this.root) + n.data!.length > this.limit) throw quotaExceeded();
    const { dir, name } = parentOf(this.root, rel);
    dir.children!.set(name, n);
    dir.mtimeMs = Date.now(); // as a file system does: a new entry changes its directory
  }

  mkdir(rel: string, a: EntryAttrs): void {
    const existing = split(rel).length ? find(this.root, rel) : this.root;
    if (existing?.kind === 'dir') { Object.assign(existing, attrsOf(a)); return; }
    this.put(rel, { ...dirNode(a), ...attrsOf(a) });
  }

  async writeFile(rel: string, body: Readable, a: EntryAttrs): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of body) chunks.push(Buffer.from(c as Buffer));
    this.put(rel, fileNode(Buffer.concat(chunks), a));
  }

  symlink(rel: string, target: string, a: EntryAttrs): void {
    this.put(rel, { ...fileNode(Buffer.alloc(0), a), kind: 'symlink', data: undefined, target });
  }

  async whiteout(rel: string): Promise<void> { this.put(rel, whiteoutNode()); }

  async setOpaque(rel: string): Promise<void> {
    const n = find(this.root, rel);
    if (n?.kind !== 'dir') throw new Error(`${rel} is not a directory`);
    n.opaque = true;
  }

  async copyFile(from: LayerReader, rel: string, to: string, attrs?: EntryAttrs): Promise<void> {
    const st = from.stat(rel)!;
    this.put(to, fileNode(from.readAll(rel), attrs ?? st));
  }

  staging(): { source: string } { return { source: `memory-staging:${this.id}` }; }
  tree(): { source: string } { return { source: `memory-tree:${this.id}` }; }
  async stagedChanges(): Promise<Change[]> { return scan(this.stagingTree).changes; }
  stagedStat(rel: string): LayerStat { return statOf(find(this.stagingTree, rel)!); }

  adopt(stagedRel: string, to: string): void {
    const from = parentOf(this.stagingTree, stagedRel);
    const n = from.dir.children!.get(from.name)!;
    from.dir.children!.delete(from.name);
    this.put(to, n);
  }
}

const attrsOf = (a: EntryAttrs) => ({
  mode: a.mode, uid: a.uid, gid: a.gid, ...(a.atimeMs !== undefined ? { atimeMs: a.atimeMs } : {}), ...(a.mtimeMs !== undefined ? { mtimeMs: a.mtimeMs } : {}),
});

/**
 * A mount's merged tree with overlayfs' write rules, for the in-memory runtime:
 * reads look in the upper tree, then the lowers top first; writes copy parent
 * directories up; a removal leaves a whiteout; a directory made over a
 * whiteout is opaque.
 */
export class MergedTree {
  constructor(private readonly upper: Node, private readonly lowers: Node[], private readonly limit: number) {}

  /** The merged entry at `path` (absolute), or null. */
  get(path: string): Node | null {
    const parts = split(path);
    if (parts.length === 0) return this.upper;
    let layers: Node[] = [this.upper, ...this.lowers];
    for (let i = 0; i < parts.length; i++) {
      const next: Node[] = [];
      let top: Node | null = null;
      for (const l of layers) {
        const c = l.children?.get(parts[i]);
        if (!c) continue;
        if (c.kind === 'whiteout') break;
        top ??= c;
        if (c.kind !== 'dir') break;
        next.push(c);
        if (c.opaque) break;
      }
      if (!top) return null;
      if (i === parts.length - 1) return top;
      if (top.kind !== 'dir') return null;
      layers = next;
    }
    return null;
  }

  list(path: string): string[] {
    const names = new Set<string>();
    const parts = split(path);
    for (const l of [this.upper, ...this.lowers]) {
      const d = parts.length ? find(l, path) : l;
      if (d?.kind !== 'dir') continue;
      for (const [n, c] of d.children!) if (c.kind !== 'whiteout' && this.get(`${path}/${n}`)) names.add(n);
    }
    return [...names].sort();
  }

  /** The upper tree's directory for `path`'s parent, copied up as needed. */
  private upperParent(path: string): { dir: Node; name: string } {
    const parts = split(path);
    const name = parts.pop()!;
    let dir = this.upper;
    let at = '';
    for (const p of parts) {
      at += `/${p}`;
      const merged = this.get(at);
      if (!merged || merged.kind !== 'dir') throw Object.assign(new Error(`${at}: No such file or directory`), { code: 'ENOENT' });
      let up = dir.children!.get(p);
      if (!up || up.kind !== 'dir') { up = { ...merged, children: new Map(), opaque: false }; dir.children!.set(p, up); }
      dir = up;
    }
    return { dir, name };
  }

  writeFile(path: string, data: Buffer, append = false): void {
    const existing = this.get(path);
    if (existing?.kind === 'dir') throw Object.assign(new Error(`${path}: Is a directory`), { code: 'EISDIR' });
    const content = append && existing?.kind === 'file' ? Buffer.concat([existing.data!, data]) : data;
    if (sizeOf(this.upper) + content.length - (existing && find(this.upper, path) ? existing.data?.length ?? 0 : 0) > this.limit) throw quotaExceeded();
    const { dir, name } = this.upperParent(path);
    dir.children!.set(name, fileNode(content, existing ?? {}));
  }

  mkdir(path: string): void {
    const existing = this.get(path);
    if (existing?.kind === 'dir') return;
    if (existing) throw Object.assign(new Error(`${path}: File exists`), { code: 'EEXIST' });
    const { dir, name } = this.upperParent(path);
    const over = dir.children!.get(name)?.kind === 'whiteout';
    dir.children!.set(name, { ...dirNode(), ...(over ? { opaque: true } : {}) });
  }

  remove(path: string): void {
    if (!this.get(path)) throw Object.assign(new Error(`${path}: No such file or directory`), { code: 'ENOENT' });
    const { dir, name } = this.upperParent(path);
    const inLower = this.lowers.some((l) => find(l, path));
    if (inLower) dir.children!.set(name, whiteoutNode());
    else dir.children!.delete(name);
  }

  /** A deep copy of the entry (the runtime's `cp`). */
  copy(from: string, to: string): void {
    const n = this.get(from);
    if (!n) throw Object.assign(new Error(`${from}: No such file or directory`), { code: 'ENOENT' });
    const { dir, name } = this.upperParent(to);
    dir.children!.set(name, clone(n));
  }
}

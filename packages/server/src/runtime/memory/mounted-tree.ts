import type { MergedTree } from '../../store/snapshotter/memory/memory-snapshotter.js';
import type { Node } from '../../store/snapshotter/memory/tree.js';

/** What the interpreter reads and writes: a merged tree, or one with volumes mounted into it. */
export type Tree = Pick<MergedTree, 'get' | 'list' | 'writeFile' | 'mkdir' | 'remove' | 'copy'>;

/**
 * The sandbox's tree with volumes (mounted contexts) at their targets: a path below a target is
 * the volume's, relative to its root; writes to a read-only one fail as on a read-only mount.
 */
export class MountedTree implements Tree {
  constructor(private readonly main: Tree, private readonly volumes: { target: string; tree: Tree; readOnly: boolean }[]) {}

  private route(p: string, write = false): { tree: Tree; path: string } {
    const clean = `/${p.split('/').filter(Boolean).join('/')}`;
    for (const v of this.volumes) {
      if (clean !== v.target && !clean.startsWith(`${v.target}/`)) continue;
      if (write && v.readOnly) throw Object.assign(new Error(`${p}: Read-only file system`), { code: 'EROFS' });
      return { tree: v.tree, path: clean.slice(v.target.length) || '/' };
    }
    return { tree: this.main, path: clean };
  }

  get(p: string): Node | null { const r = this.route(p); return r.tree.get(r.path); }
  list(p: string): string[] { const r = this.route(p); return r.tree.list(r.path); }
  writeFile(p: string, data: Buffer, append = false): void { const r = this.route(p, true); r.tree.writeFile(r.path, data, append); }
  mkdir(p: string): void { const r = this.route(p, true); r.tree.mkdir(r.path); }
  remove(p: string): void { const r = this.route(p, true); r.tree.remove(r.path); }
  copy(from: string, to: string): void {
    const a = this.route(from);
    const b = this.route(to, true);
    if (a.tree !== b.tree) throw Object.assign(new Error(`${to}: Invalid cross-device link`), { code: 'EXDEV' });
    a.tree.copy(a.path, b.path);
  }
}

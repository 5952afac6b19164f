import { createHash, randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { MountSpec } from '../../store/snapshotter/types.js';
import { SANDBOX_ROOT } from '../../util/idmap.js';
import type { SandboxSpec, SandboxVolume } from '../types.js';
import type { Views } from './views.js';

/**
 * Mount points of a sandbox's volumes (mounted contexts): for each set of targets, a directory
 * holding their paths, made once and kept (it never changes), owned by the sandboxes' root. It is
 * stacked *below* the sandbox's layers, so a directory the context has keeps its own owner and
 * mode, and one it lacks appears without being written: a mount point is never one of the
 * command's writes.
 */
export class MountPoints {
  private emptyMade = false;
  /** Trees made, by their targets as given. */
  private readonly trees = new Map<string, string>();

  constructor(private readonly dir: string) {}

  /** An empty directory: the second lower of a read-only volume with a single layer (overlayfs wants two). */
  get empty(): string {
    const at = path.join(this.dir, 'empty');
    if (!this.emptyMade) { mkdirSync(at, { recursive: true, mode: 0o755 }); this.emptyMade = true; }
    return at;
  }

  /** The tree of `targets` (absolute paths). */
  tree(targets: readonly string[]): string {
    const given = targets.join('\0');
    const known = this.trees.get(given);
    if (known) return known;
    const at = this.build(targets);
    if (this.trees.size >= 10_000) this.trees.clear();
    this.trees.set(given, at);
    return at;
  }

  private build(targets: readonly string[]): string {
    const key = createHash('sha256').update([...targets].sort().join('\0')).digest('hex').slice(0, 32);
    const at = path.join(this.dir, key);
    if (existsSync(at)) return at; // made before (by another order of the same targets, or an earlier server)
    const building = `${at}.${randomBytes(4).toString('hex')}`;
    mkdirSync(building, { recursive: true, mode: 0o755 });
    chownSync(building, SANDBOX_ROOT, SANDBOX_ROOT);
    for (const t of targets) {
      let p = building;
      for (const seg of t.split('/').filter(Boolean)) {
        p = path.join(p, seg);
        if (!existsSync(p)) { mkdirSync(p, { mode: 0o755 }); chownSync(p, SANDBOX_ROOT, SANDBOX_ROOT); }
      }
    }
    try { renameSync(building, at); } catch { rmSync(building, { recursive: true, force: true }); } // made meanwhile by another sandbox
    return at;
  }
}

/** A volume's lower directories (a read-only one with a single layer gets `empty` below it: overlayfs wants two). */
function lowerOf(v: SandboxVolume, main: MountSpec, empty: string): string {
  if (v.mount.chdir !== main.chdir) throw new Error(`a volume's layers (${v.mount.chdir}) are not in the sandbox's store (${main.chdir})`);
  return !v.readOnly || v.mount.lower.includes(':') ? v.mount.lower : `${v.mount.lower}:${empty}`;
}

/** `sbx run --overlay` (and a warm job's) value of a volume: its target inside the tree, then its overlay options. */
export function overlayArg(v: SandboxVolume, main: MountSpec, empty: string): string {
  return `${v.target.slice(1)},lowerdir=${lowerOf(v, main, empty)}${v.readOnly ? '' : `,upperdir=${v.mount.upper},workdir=${v.mount.work}`}`;
}

/** The sandbox's mount with its overlays above the layers and its volumes' mount points below them. */
export function stacked(spec: SandboxSpec, points: MountPoints | null): MountSpec {
  const lower = [...(spec.overlays ?? []), spec.mount.lower];
  if (spec.volumes?.length && points) lower.push(points.tree(spec.volumes.map((v) => v.target)));
  return lower.length === 1 ? spec.mount : { ...spec.mount, lower: lower.join(':') };
}

/**
 * The `--overlay` arguments of a sandbox's volumes; with `views` (a warm sandbox's job), a
 * read-only volume whose view is mounted is bound from it instead (`--view`, views.ts).
 */
export function overlayArgs(spec: SandboxSpec, points: MountPoints | null, views?: Views | null): string[] {
  if (!spec.volumes?.length) return [];
  if (!points) throw new Error('this runtime has no directory for mount points (its helpers directory)');
  return spec.volumes.flatMap((v) => {
    const view = v.readOnly && views ? views.arg(v.target, v.mount.chdir, lowerOf(v, spec.mount, points.empty)) : null;
    return view ? ['--view', view] : ['--overlay', overlayArg(v, spec.mount, points.empty)];
  });
}

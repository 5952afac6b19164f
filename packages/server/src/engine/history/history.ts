import { ShellbaseError, invalid } from '../../errors.js';
import type { NewVersion, VersionRow } from '../../store/metadata/types.js';
import { newId } from '../../util/ids.js';
import type { Committer } from '../commit.js';
import type { Files } from '../files/files.js';
import { parsePath, joinPath } from '../files/paths.js';
import type { VersionView } from '../files/view.js';
import { changesBetween, diverge } from '../lineage.js';
import { overlappingPaths } from '../overlap.js';
import { durably, type Caller, type Deps } from '../../core/deps.js';
import { checkName } from '../../core/validate.js';
import type { DiffChange } from '@shellbase/protocol';
import { differsAt, diffVersions, unifiedDiff } from './diff.js';
import { layersAbove, materialize, mergeConflict } from './merge.js';

interface Lookups {
  version(caller: Caller, id: string): Promise<VersionRow>;
  head(caller: Caller, name: string): Promise<VersionRow>;
}

/** Time travel (reset), diff and merge over versions. */
export class History {
  constructor(
    private readonly deps: Deps,
    private readonly committer: Committer,
    private readonly files: Files,
    private readonly lookups: Lookups,
  ) {}

  /**
   * Moves the head to `version` by adding a `reset` version with the target's
   * content on top of the current head: the history keeps every version, and
   * queries still running over the old head rebase or conflict as usual.
   */
  async reset(caller: Caller, name: string, version: string): Promise<VersionRow> {
    const target = await this.lookups.version(caller, version);
    return durably(this.deps.durability, () => this.committer.locked(caller.tenantId, name, async () => {
      for (;;) {
        const head = await this.lookups.head(caller, name);
        if (head.id === target.id) return head;
        const v: NewVersion = {
          id: newId('v'), tenantId: caller.tenantId, parent: head.id, context: name, depth: head.depth + 1, layers: target.layers,
          changes: await changesBetween(this.deps.metadata, head, target), cause: { kind: 'reset', command: `reset to ${target.id}` },
          bytes: 0, createdAt: new Date().toISOString(),
        };
        if (await this.deps.metadata.versions.commit({ version: v, moveHead: { tenantId: caller.tenantId, context: name, expectedHead: head.id } })) {
          this.committed(caller, name, v);
          return v;
        }
      }
    }));
  }

  async diff(caller: Caller, name: string, opts: { from?: string; to?: string; path?: string }): Promise<{ changes: DiffChange[]; patch?: string }> {
    const to = opts.to ? await this.lookups.version(caller, opts.to) : await this.lookups.head(caller, name);
    const from = opts.from ? await this.lookups.version(caller, opts.from)
      : to.parent ? await this.lookups.version(caller, to.parent) : to;
    const views: [VersionView, VersionView] = [await this.files.viewOf(from), await this.files.viewOf(to)];
    const only = opts.path === undefined ? undefined : joinPath(parsePath(opts.path));
    const changes = await diffVersions(this.deps.metadata, from, to, views, only);
    if (only === undefined) return { changes };
    return { changes, patch: changes.length ? await unifiedDiff(views, only) : '' };
  }

  /**
   * Merges context `from` into `name`: a 3-way merge over the paths each side
   * changed since their common ancestor. Nothing overlapping: one new version
   * on the target. Overlapping: 409 with every conflicting path, nothing changed.
   */
  async merge(caller: Caller, name: string, from: string): Promise<{ version: string }> {
    checkName(from);
    if (from === name) throw invalid('a context cannot be merged into itself', 'merge a fork into the context it came from');
    const source = await this.lookups.head(caller, from);
    return durably(this.deps.durability, () => this.committer.locked(caller.tenantId, name, async () => {
      for (;;) {
        const target = await this.lookups.head(caller, name);
        const d = await diverge(this.deps.metadata, target, source);
        if (!d) throw new ShellbaseError('failed_precondition', `${from} and ${name} share no ancestor`, { hint: 'merge forks of one context (history past the retention is dropped, and with it old common ancestors)' });
        if (d.ancestor.id === source.id) return { version: target.id }; // nothing new on the source side
        const moveHead = { tenantId: caller.tenantId, context: name, expectedHead: target.id };
        // Paths both sides changed the same way (as after an earlier merge) are no conflict.
        const [targetView, sourceView] = [await this.files.viewOf(target), await this.files.viewOf(source)];
        const differs = (p: string) => differsAt([targetView, sourceView], p);
        const conflicts = [];
        for (const p of overlappingPaths(d.b, d.a)) if (await differs(p)) conflicts.push(p);
        if (conflicts.length) throw mergeConflict(conflicts);
        const pending = [];
        for (const [p, type] of d.b) if (type !== 'd' && (await differs(p))) pending.push(p);
        if (pending.length === 0) return { version: target.id }; // the target has all of it already
        const above = layersAbove(source.layers, d.ancestor.layers);
        let layers: string[];
        let bytes = 0;
        let layerRow;
        if (d.ancestor.id === target.id) {
          layers = source.layers; // fast-forward: the source's layers as they are
        } else if (above) {
          layers = [...target.layers, ...above];
        } else {
          const layer = await materialize(this.deps.snapshotter, d.b, sourceView);
          if (!layer) return { version: target.id };
          layers = [...target.layers, layer.layerId];
          bytes = layer.bytes;
          layerRow = { id: layer.layerId, kind: 'exec' as const, bytes, createdAt: new Date().toISOString() };
          await this.deps.durability.layers();
        }
        const v: NewVersion = {
          id: newId('v'), tenantId: caller.tenantId, parent: target.id, merged: source.id, context: name,
          depth: Math.max(target.depth, source.depth) + 1, layers, changes: d.b,
          cause: { kind: 'merge', command: `merge ${from}` }, bytes, createdAt: new Date().toISOString(),
        };
        if (await this.deps.metadata.versions.commit({ version: v, layer: layerRow, moveHead })) {
          this.committed(caller, name, v);
          return { version: v.id };
        }
      }
    }));
  }

  /** Reports a head this moved. */
  private committed(caller: Caller, context: string, v: NewVersion): void {
    this.deps.events.emit({ tenantId: caller.tenantId, kind: 'version.committed', context, data: { version: v.id, parent: v.parent, cause: v.cause } });
  }
}

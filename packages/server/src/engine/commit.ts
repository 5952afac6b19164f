import type { VersionCause } from '@shellbase/protocol';
import type { CommittedLayer } from '../store/snapshotter/types.js';
import type { LeaseFence, MetadataStore, NewVersion, VersionRow } from '../store/metadata/types.js';
import type { Durability } from '../core/deps.js';
import type { EventSink } from '../events/index.js';
import { newId } from '../util/ids.js';
import { KeyedLock } from '../util/keyed-lock.js';
import { changesBetween } from './lineage.js';
import { overlappingPaths } from './overlap.js';

export interface CommitOutcome {
  /** The context's head after the commit. */
  head: string;
  /** The version made from the layer (the head when committed, unattached otherwise). */
  version: string;
  committed: boolean;
  layerCount: number;
  /** The committed version's parent (when committed). */
  parent?: string;
  conflict?: { paths: string[]; version: string };
}

/**
 * Commits a layer made over `base` to a context (architecture.md, step 5):
 * - head still at base: the new version goes on top;
 * - head moved, and nothing the layer touches overlaps what changed between
 *   base and head: the layer is stacked on the new head (rebase);
 * - otherwise: a conflict; the version is kept unattached (parent = base) so
 *   the work can still be read, forked or merged.
 * Heads only move by compare-and-set, so concurrent committers (in this
 * process or another) never lose a version; a per-context lock here just
 * keeps them from spinning.
 */
export class Committer {
  private readonly locks = new KeyedLock();

  constructor(private readonly md: MetadataStore, private readonly durability: Durability, private readonly events: EventSink) {}

  /**
   * Commits, durably: the layer is on disk before its version refers to it, the version before this
   * returns. With a `fence` (work done under a cluster lease), every attempt is refused
   * (`failed_precondition`) once the lease moved on.
   */
  async commit(tenantId: string, context: string, base: VersionRow, layer: CommittedLayer, cause: VersionCause, fence?: LeaseFence): Promise<CommitOutcome> {
    await this.durability.layers();
    const outcome = await this.locked(tenantId, context, () => this.commitLocked(tenantId, context, base, layer, cause, fence));
    await this.durability.metadata();
    if (outcome.committed) {
      this.events.emit({ tenantId, kind: 'version.committed', context, data: { version: outcome.version, parent: outcome.parent ?? null, cause } });
    }
    return outcome;
  }

  /** Runs `task` while no other commit to the context runs in this process. */
  locked<T>(tenantId: string, context: string, task: () => Promise<T>): Promise<T> {
    return this.locks.run(`${tenantId}/${context}`, task);
  }

  private async commitLocked(tenantId: string, context: string, base: VersionRow, layer: CommittedLayer, cause: VersionCause, fence?: LeaseFence): Promise<CommitOutcome> {
    const createdAt = new Date().toISOString();
    const layerRow = { id: layer.layerId, kind: 'exec' as const, bytes: layer.bytes, createdAt };
    const on = (parent: VersionRow): NewVersion => ({
      id: newId('v'), tenantId, parent: parent.id, context, depth: parent.depth + 1, layers: [...parent.layers, layer.layerId],
      changes: layer.changes, cause, bytes: layer.bytes, createdAt,
    });
    // Most often the head is still the base the query ran over: try that first, without reading
    // anything (one statement). The base's layers as the query read them may have been squashed
    // since; `requireLayers` refuses the commit if one of them is gone, and the loop below reads
    // afresh.
    const first = on(base);
    if (await this.md.versions.commit({ version: first, layer: layerRow, moveHead: { tenantId, context, expectedHead: base.id }, requireLayers: true, fence })) {
      return { head: first.id, version: first.id, committed: true, layerCount: first.layers.length, parent: base.id };
    }
    for (;;) {
      const ctx = await this.md.contexts.get(tenantId, context);
      if (!ctx) {
        // The context was deleted while the query ran: the work stays readable as an unattached
        // version that no context owns, until the next garbage collection.
        const v = { ...on(base), context: null };
        await this.md.versions.commit({ version: v, layer: layerRow, fence });
        return { head: v.id, version: v.id, committed: false, layerCount: v.layers.length };
      }
      const moveHead = { tenantId, context, expectedHead: ctx.head };
      // Re-read the base: a squash may have given it a shorter layer list meanwhile.
      base = (await this.md.versions.get(base.id)) ?? base;
      if (ctx.head === base.id) {
        const v = on(base);
        if (await this.md.versions.commit({ version: v, layer: layerRow, moveHead, fence })) {
          return { head: v.id, version: v.id, committed: true, layerCount: v.layers.length, parent: base.id };
        }
        continue;
      }
      const head = await this.md.versions.get(ctx.head);
      if (!head) throw new Error(`context ${context} points at missing version ${ctx.head}`);
      const theirs = await changesBetween(this.md, base, head);
      const paths = theirs === null ? layer.changes.map(([p]) => p) : overlappingPaths(layer.changes, theirs);
      if (paths.length > 0) {
        const v = on(base);
        await this.md.versions.commit({ version: v, layer: layerRow, fence });
        return { head: head.id, version: v.id, committed: false, layerCount: v.layers.length, conflict: { paths, version: v.id } };
      }
      const v = on(head);
      if (await this.md.versions.commit({ version: v, layer: layerRow, moveHead, fence })) {
        return { head: v.id, version: v.id, committed: true, layerCount: v.layers.length, parent: head.id };
      }
    }
  }
}

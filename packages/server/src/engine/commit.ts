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

/** One context's part of a commit made together with others (commitTogether). */
export interface CommitPart {
  context: string;
  base: VersionRow;
  layer: CommittedLayer;
  /** Its version's cause, given the ids of every part's version (in order): the versions name each other. */
  cause(ids: readonly string[]): VersionCause;
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

  /**
   * Commits layers to several contexts (a query's own and its writable mounts) as one: every head
   * moves, or none does. Each part gets the optimistic concurrency of `commit` (a moved head is
   * rebased onto when nothing overlaps); when any part conflicts, or any context is gone, no head
   * moves and every part's version is kept unattached on its base, each conflict named on its part.
   */
  async commitTogether(tenantId: string, parts: readonly CommitPart[], fence?: LeaseFence): Promise<CommitOutcome[]> {
    await this.durability.layers();
    const keys = [...new Set(parts.map((p) => p.context))].sort();
    // Locks taken in one order (a single commit takes one): no two commits wait for each other.
    const run = keys.reduceRight<() => Promise<CommitOutcome[]>>((inner, c) => () => this.locked(tenantId, c, inner), () => this.togetherLocked(tenantId, parts, fence));
    const outcomes = await run();
    await this.durability.metadata();
    outcomes.forEach((o, i) => {
      if (o.committed) this.events.emit({ tenantId, kind: 'version.committed', context: parts[i].context, data: { version: o.version, parent: o.parent ?? null, cause: parts[i].cause(outcomes.map((x) => x.version)) } });
    });
    return outcomes;
  }

  private async togetherLocked(tenantId: string, parts: readonly CommitPart[], fence?: LeaseFence): Promise<CommitOutcome[]> {
    const createdAt = new Date().toISOString();
    const ids = parts.map(() => newId('v'));
    const build = (i: number, parent: VersionRow, context: string | null): NewVersion => {
      const { layer } = parts[i];
      return {
        id: ids[i], tenantId, parent: parent.id, context, depth: parent.depth + 1, layers: [...parent.layers, layer.layerId],
        changes: layer.changes, cause: parts[i].cause(ids), bytes: layer.bytes, createdAt,
      };
    };
    const layerRow = (i: number) => ({ id: parts[i].layer.layerId, kind: 'exec' as const, bytes: parts[i].layer.bytes, createdAt });
    const landed = (parents: readonly VersionRow[]): CommitOutcome[] => parts.map((_, i) => ({
      head: ids[i], version: ids[i], committed: true, layerCount: parents[i].layers.length + 1, parent: parents[i].id,
    }));
    // Most often every head is still the base its part ran over (as in `commit`).
    const bases = parts.map((p) => p.base);
    if (await this.md.versions.commitAll(parts.map((p, i) => ({
      version: build(i, p.base, p.context), layer: layerRow(i), moveHead: { tenantId, context: p.context, expectedHead: p.base.id }, requireLayers: true, fence,
    })))) return landed(bases);
    for (;;) {
      const plans: { base: VersionRow; parent: VersionRow; head: string | null; conflict?: string[] }[] = [];
      for (const [i, p] of parts.entries()) {
        const ctx = await this.md.contexts.get(tenantId, p.context);
        const base = (await this.md.versions.get(p.base.id)) ?? p.base;
        if (!ctx) { plans.push({ base, parent: base, head: null }); continue; }
        if (ctx.head === base.id) { plans.push({ base, parent: base, head: ctx.head }); continue; }
        const head = await this.md.versions.get(ctx.head);
        if (!head) throw new Error(`context ${p.context} points at missing version ${ctx.head}`);
        const theirs = await changesBetween(this.md, base, head);
        const paths = theirs === null ? parts[i].layer.changes.map(([x]) => x) : overlappingPaths(parts[i].layer.changes, theirs);
        plans.push({ base, parent: paths.length ? base : head, head: ctx.head, ...(paths.length ? { conflict: paths } : {}) });
      }
      if (plans.some((p) => p.head === null || p.conflict)) {
        // Nothing moves: each part's work stays readable, unattached on its own base.
        await this.md.versions.commitAll(parts.map((p, i) => ({ version: build(i, plans[i].base, plans[i].head === null ? null : p.context), layer: layerRow(i), fence })));
        return parts.map((p, i) => ({
          head: plans[i].head ?? ids[i], version: ids[i], committed: false, layerCount: plans[i].base.layers.length + 1,
          ...(plans[i].conflict ? { conflict: { paths: plans[i].conflict!, version: ids[i] } } : {}),
        }));
      }
      if (await this.md.versions.commitAll(parts.map((p, i) => ({
        version: build(i, plans[i].parent, p.context), layer: layerRow(i), moveHead: { tenantId, context: p.context, expectedHead: plans[i].head! }, fence,
      })))) return landed(plans.map((x) => x.parent));
    }
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

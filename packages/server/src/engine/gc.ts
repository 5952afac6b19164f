import type { GcResult } from '@shellbase/protocol';
import type { GraphVersion } from '../store/metadata/types.js';
import type { Deps } from '../core/deps.js';

/** How much history a tenant keeps. */
export interface Retention {
  /** Versions created before this instant (ISO time) may go. */
  cutoff: string;
  /** Versions within this many steps of a head (or a kept unattached version) stay whatever their age. */
  keepVersions: number;
}

/**
 * The versions garbage collection may drop. A version stays when it is
 * - a context's head;
 * - unattached (no head reaches it, e.g. a conflict) but still owned by a
 *   context and newer than the retention cutoff;
 * - reachable from one of those (over parent and merged links) and either
 *   fewer than `keepVersions` steps away from it or newer than the cutoff;
 * - pinned by running work, or between a pinned version and a head that
 *   reaches it: a query over an old version rebases by walking from the head
 *   down to its base.
 * Everything else goes: the history of deleted contexts at once, old history
 * of live ones once it is past retention.
 */
export function garbage(
  versions: readonly GraphVersion[], heads: readonly string[], pinned: ReadonlySet<string>,
  retentionOf: (tenantId: string) => Retention,
): string[] {
  const byId = new Map(versions.map((v) => [v.id, v]));
  const reachable = new Set<string>();
  const walk = [...heads];
  while (walk.length) {
    const id = walk.pop()!;
    const v = byId.get(id);
    if (!v || reachable.has(id)) continue;
    reachable.add(id);
    if (v.parent) walk.push(v.parent);
    if (v.merged) walk.push(v.merged);
  }
  const roots = new Set(heads);
  for (const v of versions) {
    if (!reachable.has(v.id) && v.context !== null && v.createdAt >= retentionOf(v.tenantId).cutoff) roots.add(v.id);
  }
  // Breadth first from every root at once: each version's least distance to one.
  const distance = new Map<string, number>();
  let frontier = [...roots].filter((id) => byId.has(id));
  for (const id of frontier) distance.set(id, 0);
  for (let d = 1; frontier.length; d++) {
    const next: string[] = [];
    for (const id of frontier) {
      const v = byId.get(id)!;
      for (const p of [v.parent, v.merged]) {
        if (!p || distance.has(p) || !byId.has(p)) continue;
        const r = retentionOf(byId.get(p)!.tenantId);
        if (d >= r.keepVersions && byId.get(p)!.createdAt < r.cutoff) continue;
        distance.set(p, d);
        next.push(p);
      }
    }
    frontier = next;
  }
  // Forward from each pinned version, over child links, to the heads that reach it.
  const children = new Map<string, string[]>();
  for (const v of versions) {
    for (const p of [v.parent, v.merged]) if (p) children.set(p, [...(children.get(p) ?? []), v.id]);
  }
  const between = [...pinned].filter((id) => byId.has(id));
  const seen = new Set(between);
  for (const id of between) distance.set(id, distance.get(id) ?? 0);
  while (between.length) {
    for (const c of children.get(between.pop()!) ?? []) {
      if (!reachable.has(c) || seen.has(c)) continue;
      seen.add(c);
      distance.set(c, distance.get(c) ?? 0);
      between.push(c);
    }
  }
  return versions.filter((v) => !distance.has(v.id)).map((v) => v.id);
}

const DAY_MS = 86_400_000;

/**
 * Garbage collection: drops versions `garbage()` selects and deletes the
 * layers no remaining version refers to. One run at a time; it runs every
 * `config.gc.intervalMs`, soon after a context is deleted, and on demand.
 *
 * Safety: version rows and layer rows go in one metadata transaction (which
 * re-checks heads), directories only afterwards, and only for layers that had
 * rows (a commit renames its directory into place before it inserts the row,
 * so a row-less directory may be one being committed). A crash between the
 * transaction and the directories leaves row-less directories, which start-up
 * recovery removes. A layer pinned by running work keeps its directory until
 * a later run finds it unpinned.
 */
export class GarbageCollector {
  private running: Promise<GcResult> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private soon: NodeJS.Timeout | null = null;
  /** Layers whose rows are gone but whose directories were pinned at the last run. */
  private readonly deferred = new Set<string>();

  /** `templates` collects machines' templates nothing stands on any more (Machines.collectTemplates). */
  constructor(private readonly deps: Deps, private readonly templates: () => Promise<number> = async () => 0) {}

  /** Runs every `intervalMs` from now on. */
  start(): void {
    this.timer = setInterval(() => this.background(), this.deps.config.gc.intervalMs);
    this.timer.unref();
  }

  /** Asks for a run shortly (coalesced): after a delete, so its bytes go soon. */
  schedule(delayMs = 1000): void {
    if (this.soon) return;
    this.soon = setTimeout(() => { this.soon = null; this.background(); }, delayMs);
    this.soon.unref();
  }

  /** Runs now, or joins the run in progress. */
  run(): Promise<GcResult> {
    this.running ??= this.collect().finally(() => { this.running = null; });
    return this.running;
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.soon) clearTimeout(this.soon);
    this.timer = this.soon = null;
    await this.running?.catch(() => undefined);
  }

  private background(): void {
    this.run().catch((err) => this.deps.log.error({ err }, 'garbage collection failed'));
  }

  private async collect(): Promise<GcResult> {
    const { metadata, snapshotter: layers, pins, log, meter } = this.deps;
    const started = performance.now();
    const retentions = await this.retentions();
    const { versions, heads } = await metadata.versionGraph();
    let pinned = pins.snapshot();
    const doomed = garbage(versions, heads, pinned.versions, retentions);
    // No await between this snapshot and the call: work that pinned a version meanwhile keeps it.
    pinned = pins.snapshot();
    const dropped = await metadata.dropVersions(doomed.filter((id) => !pinned.versions.has(id)), pinned.layers);
    for (const l of dropped.layers) this.deferred.add(l.id);
    let layersDeleted = 0;
    for (const id of [...this.deferred]) {
      if (pins.layerPinned(id)) continue;
      await layers.remove(id);
      this.deferred.delete(id);
      layersDeleted++;
    }
    const templatesDeleted = await this.templates().catch((err) => { log.error({ err }, 'collecting machine templates failed'); return 0; });
    const result: GcResult = {
      versionsDropped: dropped.versions,
      layersDeleted,
      templatesDeleted,
      bytesFreed: dropped.layers.reduce((n, l) => n + l.bytes, 0),
      deferredLayers: this.deferred.size,
      ms: Math.round(performance.now() - started),
    };
    meter.gcRan(result);
    if (result.versionsDropped || result.layersDeleted || result.templatesDeleted) log.info(result, 'garbage collected');
    return result;
  }

  /** Each tenant's retention: its own settings, else the server's. */
  private async retentions(): Promise<(tenantId: string) => Retention> {
    const { config, metadata } = this.deps;
    const now = Date.now();
    const of = (days: number, keep: number): Retention => ({
      cutoff: new Date(now - days * DAY_MS).toISOString(), keepVersions: Math.max(1, keep),
    });
    const fallback = of(config.gc.retentionDays, config.gc.keepVersions);
    const own = new Map<string, Retention>();
    for (const t of await metadata.listTenants()) {
      const q = t.quotas;
      if (q?.retentionDays !== undefined || q?.keepVersions !== undefined) {
        own.set(t.id, of(q.retentionDays ?? config.gc.retentionDays, q.keepVersions ?? config.gc.keepVersions));
      }
    }
    return (tenantId) => own.get(tenantId) ?? fallback;
  }
}

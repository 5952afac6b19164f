import type { GcResult } from '@shellbase/protocol';
import type { LayerRow, Retention } from '../store/metadata/types.js';
import type { Deps } from '../core/deps.js';
import { inBackground } from '../util/background.js';
import { Pacer } from '../util/pacer.js';

export type { Retention } from '../store/metadata/types.js';

/** A version as the reference model of collection sees it. */
export interface GraphVersion {
  id: string;
  tenantId: string;
  parent: string | null;
  merged: string | null;
  context: string | null;
  createdAt: string;
}

/**
 * The versions garbage collection may drop, over a whole graph in memory: the
 * reference model that VersionRepository.garbage implements in SQL a page at
 * a time (test/unit/gc-model.test.ts checks they agree). A version stays when it is
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
 * Each drop or fold is one transaction, synchronous from start to commit, so its size is what the
 * event loop waits for: pages are sized to take ~5 ms (util/pacer.ts). A version's drop costs
 * ~0.05 ms on a small store and 0.2–0.5 ms at a million versions (its rows, six indexes, its
 * children's links and its layers' references).
 */
const PAGE_MS = 5;
const dropPacer = () => new Pacer({ targetMs: PAGE_MS, min: 5, max: 500, initial: 25 });
const foldPacer = () => new Pacer({ targetMs: PAGE_MS, min: 20, max: 5_000, initial: 200 });
/** Layers whose rows a transaction removes (one statement each way: cheap). */
const LAYER_PAGE = 100;
/**
 * Versions one search for garbage finds (`versions.garbage`: a read off the event loop whose cost is
 * mostly fixed, walking every head's recent ancestry), dropped a page at a time.
 */
const SEARCH_PAGE = 1_000;

const breath = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Garbage collection: drops the versions the rules (`garbage()` above, the
 * reference model; VersionRepository.garbage selects them in SQL) give up,
 * deletes the layers no version refers to any more, folds old usage rows
 * into hourly ones, and returns freed pages to the file system. One run at a
 * time; it runs every `config.gc.intervalMs`, soon after a context is
 * deleted, and on demand.
 *
 * Bounded: it works a tenant at a time and a page of versions per
 * transaction (sized to take ~5 ms), yielding to the event loop between pages, and stops at
 * `config.gc.budgetMs` (the next run goes on: garbage is found afresh each
 * time, so no progress is kept in memory). Memory and time follow the
 * garbage, not the history kept.
 *
 * Safety: version rows and layer rows go in one transaction (which re-checks
 * heads), trees only afterwards, and only of layers whose rows went (a commit
 * renames its tree into place before it inserts the row, so a row-less tree
 * may be one being committed). A crash between leaves row-less trees, which
 * start-up recovery removes. A layer pinned by running work keeps its row and
 * tree until a later run finds it unpinned.
 */
export class GarbageCollector {
  private running: Promise<GcResult | null> | null = null;
  /** Work during which nothing is collected (a backup taking its consistent point): runs wait for it. */
  private pausedBy: Promise<unknown> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private soon: NodeJS.Timeout | null = null;

  /** `templates` collects machines' templates nothing stands on any more (Machines.collectTemplates). */
  constructor(private readonly deps: Deps, private readonly templates: () => Promise<number> = async () => 0) {}

  /** Runs every `intervalMs` from now on. */
  start(): void {
    this.timer = setInterval(() => inBackground(() => this.background()), this.deps.config.gc.intervalMs);
    this.timer.unref();
  }

  /** Asks for a run shortly (coalesced): after a delete, so its bytes go soon. */
  schedule(delayMs = 1000): void {
    if (this.soon) return;
    this.soon = setTimeout(() => { this.soon = null; inBackground(() => this.background()); }, delayMs);
    this.soon.unref();
  }

  /**
   * Runs now, or joins the run in progress. In a cluster one worker collects at a time (an
   * advisory lock): a run asked for waits for another worker's to end, then runs.
   */
  run(): Promise<GcResult> {
    this.running ??= this.exclusive(true).finally(() => { this.running = null; });
    return this.running as Promise<GcResult>;
  }

  private async exclusive(wait: boolean): Promise<GcResult | null> {
    const cluster = this.deps.cluster;
    return cluster ? cluster.exclusive('shellbase:gc', () => this.collect(), { wait }) : this.collect();
  }

  /**
   * Runs `fn` once no collection is running and with none starting until it ends (a run asked
   * for meanwhile waits for it): what `fn` reads of the store is not dropped under it.
   */
  async paused<T>(fn: () => Promise<T>): Promise<T> {
    for (;;) {
      if (this.pausedBy) await this.pausedBy.catch(() => undefined);
      else if (this.running) await this.running.catch(() => undefined);
      else break;
    }
    const p = fn();
    this.pausedBy = p;
    try { return await p; } finally { this.pausedBy = null; }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.soon) clearTimeout(this.soon);
    this.timer = this.soon = null;
    await this.running?.catch(() => undefined);
  }

  /** A scheduled run: skipped when one runs here, or (in a cluster) on another worker. */
  private background(): void {
    if (this.running) return;
    this.running = this.exclusive(false).finally(() => { this.running = null; });
    this.running.catch((err) => this.deps.log.error({ err }, 'garbage collection failed'));
  }

  private async collect(): Promise<GcResult> {
    while (this.pausedBy) await this.pausedBy.catch(() => undefined);
    const { metadata, snapshotter, log, meter, config, cluster } = this.deps;
    const started = performance.now();
    // In a cluster, what the other workers' running work pins (their last heartbeats) counts too.
    const elsewhere = cluster ? await cluster.pinnedElsewhere() : null;
    const pins = { snapshot: () => withElsewhere(this.deps.pins.snapshot(), elsewhere) };
    const deadline = started + config.gc.budgetMs;
    const retentionOf = await this.retentions();
    const removed: LayerRow[] = [];
    let versionsDropped = 0;
    let deferred = 0;
    let complete = true;
    const pacer = dropPacer();
    const dropPage = async (ids: readonly string[]) => {
      // No await between this snapshot and the drop's transaction: work that pinned a version
      // meanwhile keeps it (its row read waits for the transaction, then finds it or not).
      const pinned = pins.snapshot();
      const free = ids.filter((id) => !pinned.versions.has(id));
      const r = await metadata.versions.drop(free, pinned.layers);
      versionsDropped += r.versions;
      removed.push(...r.layers);
      deferred += r.deferred;
      return free.length; // pinned ones were skipped: they teach the pacer nothing
    };
    tenants: for (let after: string | null = null; ;) {
      const ids = await metadata.tenants.ids(after, 100);
      if (ids.length === 0) break;
      after = ids[ids.length - 1];
      for (const tenantId of ids) {
        for (;;) {
          if (performance.now() > deadline) { complete = false; break tenants; }
          const found = await metadata.versions.garbage(tenantId, retentionOf(tenantId), [...pins.snapshot().versions], SEARCH_PAGE);
          const whole = await pacer.each(found, dropPage, async () => { await breath(); return performance.now() <= deadline; });
          if (!whole) { complete = false; break tenants; }
          await breath();
          if (found.length < SEARCH_PAGE) break;
        }
      }
    }
    // Layers left by earlier runs while running work used them.
    const left = await metadata.versions.dropUnreferencedLayers(pins.snapshot().layers, LAYER_PAGE);
    removed.push(...left.layers);
    deferred = left.deferred;
    for (let i = 0; i < removed.length; i += LAYER_PAGE) {
      await snapshotter.remove(removed.slice(i, i + LAYER_PAGE).map((l) => l.id));
      await breath();
    }
    if (cluster) {
      await cluster.sweepOrphanBlobs().catch((err) => { log.error({ err }, 'looking for blobs nothing names in the object store failed'); });
      await cluster.deleteDueBlobs().catch((err) => { log.error({ err }, 'deleting blobs from the object store failed'); });
    }
    const usageRowsRolledUp = complete ? await this.rollUp(deadline) : 0;
    if (complete) await this.trimEgressLog(deadline);
    if (complete) await this.trimEvents(deadline);
    await this.reclaim(deadline);
    const templatesDeleted = await this.templates().catch((err) => { log.error({ err }, 'collecting machine templates failed'); return 0; });
    const result: GcResult = {
      versionsDropped,
      layersDeleted: removed.length,
      templatesDeleted,
      bytesFreed: removed.reduce((n, l) => n + l.bytes, 0),
      deferredLayers: deferred,
      usageRowsRolledUp,
      complete,
      ms: Math.round(performance.now() - started),
    };
    meter.gcRan(result);
    if (result.versionsDropped || result.layersDeleted || result.templatesDeleted || !complete) log.info(result, 'garbage collected');
    return result;
  }

  /** Returns the database's free pages to the file system, a paced step at a time, at least one step and then within the budget. */
  private async reclaim(deadline: number): Promise<void> {
    const pacer = new Pacer({ targetMs: PAGE_MS, min: 16, max: 8_192, initial: 128 });
    let before = Infinity;
    for (;;) {
      const pages = pacer.size;
      const t0 = performance.now();
      const left = await this.deps.metadata.reclaim(pages);
      pacer.record(pages, performance.now() - t0);
      // Done, out of budget, or no headway (writers freeing pages as fast): the next run goes on.
      if (left === 0 || performance.now() > deadline || left >= before) return;
      before = left;
      await breath();
    }
  }

  /** Folds usage rows older than a day into hourly rows, a page at a time, within the budget. */
  private async rollUp(deadline: number): Promise<number> {
    const before = new Date(Date.now() - DAY_MS).toISOString();
    return foldPacer().drain((limit) => this.deps.metadata.usage.rollUp(before, limit), () => performance.now() < deadline);
  }

  /** Drops egress audit entries older than SHELLBASE_EGRESS_LOG_DAYS, a page at a time, within the budget. */
  private async trimEgressLog(deadline: number): Promise<void> {
    const before = new Date(Date.now() - this.deps.config.egress.logDays * DAY_MS).toISOString();
    await foldPacer().drain((limit) => this.deps.metadata.egressLog.trim(before, limit), () => performance.now() < deadline);
  }

  /** Drops events older than SHELLBASE_EVENTS_DAYS (not ones a webhook delivery still waits for), a page at a time, within the budget. */
  private async trimEvents(deadline: number): Promise<void> {
    const before = new Date(Date.now() - this.deps.config.events.keepDays * DAY_MS).toISOString();
    await foldPacer().drain((limit) => this.deps.metadata.events.trim(before, limit), () => performance.now() < deadline);
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
    for (const t of await metadata.tenants.list()) {
      const q = t.quotas;
      if (q?.retentionDays !== undefined || q?.keepVersions !== undefined) {
        own.set(t.id, of(q.retentionDays ?? config.gc.retentionDays, q.keepVersions ?? config.gc.keepVersions));
      }
    }
    return (tenantId) => own.get(tenantId) ?? fallback;
  }
}

/** The local pins with the other workers' added (the same sets when there are none). */
function withElsewhere(local: { versions: Set<string>; layers: Set<string> }, elsewhere: { versions: Set<string>; layers: Set<string> } | null) {
  if (!elsewhere) return local;
  for (const v of elsewhere.versions) local.versions.add(v);
  for (const l of elsewhere.layers) local.layers.add(l);
  return local;
}

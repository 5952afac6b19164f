import type { VersionRow } from '../store/metadata/types.js';
import { KeyedLock } from '../util/keyed-lock.js';
import type { Deps } from '../core/deps.js';
import { inBackground } from '../util/background.js';

/** How many of the newest layers stay as they are when a chain is squashed. */
const KEEP_TOP = 4;
/**
 * The longest chain a sandbox may mount: overlayfs options must fit in one
 * page, and a layer costs ~35 bytes of it. A query over a longer chain waits
 * for a squash first (the background squash normally keeps chains far shorter).
 */
export const MAX_MOUNT_LAYERS = 80;

/**
 * Keeps layer chains short: overlayfs mounts cost more with every layer and
 * their options must fit in one page. When a context's head has more than
 * `config.squashAbove` layers over its image, the oldest ones (all but the
 * newest KEEP_TOP) are squashed into one layer in the background and every
 * version built on that exact prefix is rewritten to use it. A version's
 * content never changes, only its representation; the old layers stay on disk
 * for queries still running over them.
 */
export class Squasher {
  private readonly running = new Map<string, Promise<void>>();
  /** Contexts whose trigger found their squash running: squashed once more when it ends. */
  private readonly again = new Set<string>();
  private readonly locks = new KeyedLock();

  constructor(private readonly deps: Deps) {}

  /**
   * Starts a squash of the context's head if its chain is long. When one is running, it runs
   * again once it ended: a commit that landed meanwhile on a base read before the squash
   * rewrote it stacks on the old, long chain (its layers are all still there), and its
   * trigger must not be lost.
   */
  maybeSquash(tenantId: string, context: string, layerCount: number): void {
    if (layerCount - 1 <= this.deps.config.squashAbove) return;
    const key = `${tenantId}/${context}`;
    if (this.running.has(key)) {
      this.again.add(key);
      return;
    }
    const job = inBackground(() => this.squashHead(tenantId, context))
      .then(() => undefined, (err) => { this.deps.log.error({ err, context }, 'squash failed'); })
      .finally(() => {
        this.running.delete(key);
        // Started before this job settles, so `idle` waits for it too.
        if (this.again.delete(key)) this.maybeSquash(tenantId, context, Infinity);
      });
    this.running.set(key, job);
  }

  /**
   * Squashes the context's head, and again while commits that landed during a squash (whose
   * triggers found it running) left the head's chain too long: a few rounds at most.
   */
  private async squashHead(tenantId: string, context: string): Promise<void> {
    for (let round = 0; round < 4; round++) {
      const ctx = await this.deps.metadata.contexts.get(tenantId, context);
      const head = ctx && (await this.deps.metadata.versions.get(ctx.head));
      if (!head || head.layers.length - 1 <= this.deps.config.squashAbove) return;
      if ((await this.squashVersion(head)) === 0) return;
    }
  }

  /** The version, squashed first if its chain is too long to mount. */
  async mountable(version: VersionRow): Promise<VersionRow> {
    if (version.layers.length <= MAX_MOUNT_LAYERS) return version;
    await this.squashVersion(version);
    return (await this.deps.metadata.versions.get(version.id)) ?? version;
  }

  /** Squashes all but the newest KEEP_TOP layers of a version (one squash per layer chain at a time). */
  async squashVersion(version: VersionRow): Promise<number> {
    const { metadata, snapshotter: layers, log } = this.deps;
    const key = version.layers[1] ?? version.id;
    const cluster = this.deps.cluster;
    // One squash per chain at a time: in this process, or in a cluster on any worker (the second
    // then finds the chain already short, or the prefix gone, and does nothing).
    const exclusive = (task: () => Promise<number>) => (cluster ? cluster.exclusive(`shellbase:squash:${key}`, task).then((n) => n ?? 0) : this.locks.run(key, task));
    return exclusive(() => this.pinned(version.id, async (current) => {
      if (!current || current.layers.length - 1 <= KEEP_TOP + 1) return 0;
      const prefix = current.layers.slice(0, current.layers.length - KEEP_TOP);
      const [image, ...rest] = prefix;
      const started = performance.now();
      const squashed = await layers.squash(rest);
      // The version that introduced the prefix: the rewrite walks only its descendants.
      const from = (await metadata.versions.lineage(current.id, KEEP_TOP + 2)).find((v) => v.layers.length === prefix.length
        && v.layers.every((l, i) => l === prefix[i]));
      const rewritten = await metadata.versions.replaceLayerPrefix(prefix, [image, squashed.layerId], {
        id: squashed.layerId, kind: 'squash', bytes: squashed.bytes, createdAt: new Date().toISOString(),
      }, from?.id ?? null);
      this.deps.meter.squashed(rest.length);
      log.info({ version: version.id, layers: rest.length, rewritten, ms: Math.round(performance.now() - started) }, 'squashed layers');
      return rewritten;
    }));
  }

  /** Runs `task` over the version's current row with the version and its layers pinned. */
  private async pinned<T>(id: string, task: (current: VersionRow | null) => Promise<T>): Promise<T> {
    const hold = this.deps.pins.hold();
    try {
      hold.version(id);
      const current = await this.deps.metadata.versions.get(id);
      if (current) hold.layerIds(current.layers);
      return await task(current);
    } finally {
      hold.release();
    }
  }

  /** Waits for running squashes (shutdown and tests). */
  async idle(): Promise<void> {
    while (this.running.size) await Promise.all(this.running.values());
  }
}

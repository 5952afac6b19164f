import type { EngineDeps } from './types.js';

/** How many of the newest layers stay as they are when a chain is squashed. */
const KEEP_TOP = 4;

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

  constructor(private readonly deps: EngineDeps) {}

  /** Starts a squash of the context's head if its chain is long and none is running. */
  maybeSquash(tenantId: string, context: string, layerCount: number): void {
    if (layerCount - 1 <= this.deps.config.squashAbove) return;
    const key = `${tenantId}/${context}`;
    if (this.running.has(key)) return;
    const job = this.squash(tenantId, context)
      .then(() => undefined, (err) => { this.deps.log.error({ err, context }, 'squash failed'); })
      .finally(() => this.running.delete(key));
    this.running.set(key, job);
  }

  async squash(tenantId: string, context: string): Promise<number> {
    const { metadata, layers, log } = this.deps;
    const ctx = await metadata.getContext(tenantId, context);
    if (!ctx) return 0;
    const head = await metadata.getVersion(ctx.head);
    if (!head || head.layers.length - 1 <= KEEP_TOP + 1) return 0;
    const prefix = head.layers.slice(0, head.layers.length - KEEP_TOP);
    const [image, ...rest] = prefix;
    if (rest.length < 2) return 0;
    const started = performance.now();
    const squashed = await layers.squash(rest);
    const rewritten = await metadata.replaceLayerPrefix(prefix, [image, squashed.layerId], {
      id: squashed.layerId, kind: 'squash', bytes: squashed.bytes, createdAt: new Date().toISOString(),
    });
    log.info({ context, layers: rest.length, rewritten, ms: Math.round(performance.now() - started) }, 'squashed layers');
    return rewritten;
  }

  /** Waits for running squashes (shutdown and tests). */
  async idle(): Promise<void> {
    while (this.running.size) await Promise.all(this.running.values());
  }
}

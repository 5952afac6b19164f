/**
 * Sizes pages of work that hold the event loop while they run (a SQLite transaction is
 * synchronous from start to commit), so that each page takes about `targetMs` whatever one
 * item costs on this host and at this size of database. After each page it learns what one
 * item took (smoothed over the last pages) and sizes the next page to fit, within
 * `[min, max]`. Before the first page it offers `initial`.
 *
 * A page's time is wall time: on a busy host, where the thread also waits for a CPU, pages
 * get smaller, which is what keeps other requests answered.
 */
export class Pacer {
  private perItemMs: number | null = null;

  constructor(private readonly o: { targetMs: number; min: number; max: number; initial: number }) {
    if (!(o.min >= 1 && o.min <= o.initial && o.initial <= o.max)) throw new RangeError('Pacer: min ≤ initial ≤ max, min ≥ 1');
  }

  /** How many items the next page should hold. */
  get size(): number {
    if (this.perItemMs === null) return this.o.initial;
    const fit = Math.floor(this.o.targetMs / Math.max(this.perItemMs, 1e-6));
    return Math.min(this.o.max, Math.max(this.o.min, fit));
  }

  /** What a page of `items` took, in milliseconds. */
  record(items: number, ms: number): void {
    if (items <= 0 || !Number.isFinite(ms) || ms < 0) return;
    const per = ms / items;
    this.perItemMs = this.perItemMs === null ? per : (this.perItemMs + per) / 2;
  }

  /**
   * Runs `page` on successive slices of `items`, each sized by the pacer, calling `between` after
   * each one but the last (false from it stops: `each` then answers false). A page may answer how
   * many of its items it worked on (the rest skipped: they cost nothing and teach nothing).
   */
  async each<T>(items: readonly T[], page: (slice: readonly T[]) => Promise<number | void>, between: () => Promise<unknown> | boolean): Promise<boolean> {
    for (let i = 0; i < items.length;) {
      const slice = items.slice(i, i + this.size);
      const t0 = performance.now();
      const worked = await page(slice);
      this.record(typeof worked === 'number' ? worked : slice.length, performance.now() - t0);
      i += slice.length;
      if (i < items.length && (await between()) === false) return false;
    }
    return true;
  }

  /**
   * Runs `step(limit)` with paced limits while `go()` holds, yielding to the event loop after each
   * one, until a step does less than its limit (nothing is left); answers the items done.
   */
  async drain(step: (limit: number) => Promise<number>, go: () => boolean): Promise<number> {
    let total = 0;
    while (go()) {
      const limit = this.size;
      const t0 = performance.now();
      const n = await step(limit);
      this.record(limit, performance.now() - t0);
      total += n;
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (n < limit) break;
    }
    return total;
  }
}

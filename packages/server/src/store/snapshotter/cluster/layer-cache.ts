/**
 * The bytes of layers a worker keeps, in order of last use (a Map keeps insertion order, and a
 * touch re-inserts): the bookkeeping behind the cluster snapshotter's bounded cache. It decides
 * nothing about what may go; `victims` lists candidates oldest first and the caller skips what
 * running work uses.
 */
export class LayerCache {
  private readonly sizes = new Map<string, number>();
  private total = 0;

  constructor(readonly maxBytes: number) {}

  get bytes(): number { return this.total; }
  get size(): number { return this.sizes.size; }

  /** Records a use of the layer (and its bytes, when known: a touch without them keeps the old figure). */
  touch(layerId: string, bytes?: number): void {
    const old = this.sizes.get(layerId);
    const size = bytes ?? old ?? 0;
    if (old !== undefined) {
      this.sizes.delete(layerId);
      this.total -= old;
    }
    this.sizes.set(layerId, size);
    this.total += size;
  }

  forget(layerId: string): void {
    const old = this.sizes.get(layerId);
    if (old === undefined) return;
    this.sizes.delete(layerId);
    this.total -= old;
  }

  has(layerId: string): boolean { return this.sizes.has(layerId); }

  /** Whether the cache holds more than its bound. */
  over(): boolean { return this.total > this.maxBytes; }

  /** Layers least recently used first. */
  *victims(): Generator<string> {
    for (const id of [...this.sizes.keys()]) yield id;
  }
}

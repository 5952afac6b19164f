/**
 * What running work uses, so that garbage collection leaves it alone.
 *
 * Every operation (an API request, a service run, a background squash) owns one `Hold`.
 * Looking a version up through the engine pins its id *before* the row is
 * read and its layers right after, so a version an operation has seen stays
 * (with the exact layers it mounted, even if a squash rewrites the row
 * meanwhile) until the hold is released. Counts, not sets: two operations may
 * pin the same thing.
 */
export class Pins {
  private readonly versions = new Map<string, number>();
  private readonly layers = new Map<string, number>();

  /** Holds not yet released: the operations running now (a worker's load in a cluster). */
  active = 0;

  hold(): Hold {
    this.active++;
    return new Hold(this.versions, this.layers, () => { this.active--; });
  }

  /** What is pinned right now. */
  snapshot(): { versions: Set<string>; layers: Set<string> } {
    return { versions: new Set(this.versions.keys()), layers: new Set(this.layers.keys()) };
  }

  layerPinned(id: string): boolean {
    return this.layers.has(id);
  }
}

export class Hold {
  private readonly mine: [Map<string, number>, string][] = [];
  private released = false;

  constructor(private readonly versions: Map<string, number>, private readonly layers: Map<string, number>, private readonly ended: () => void = () => undefined) {}

  version(id: string): void { this.add(this.versions, id); }

  layerIds(ids: readonly string[]): void { for (const id of ids) this.add(this.layers, id); }

  /** Drops every pin of this hold (idempotent). */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.ended();
    for (const [map, id] of this.mine) {
      const n = (map.get(id) ?? 1) - 1;
      if (n > 0) map.set(id, n); else map.delete(id);
    }
    this.mine.length = 0;
  }

  private add(map: Map<string, number>, id: string): void {
    if (this.released) throw new Error('a released hold cannot pin');
    map.set(id, (map.get(id) ?? 0) + 1);
    this.mine.push([map, id]);
  }
}

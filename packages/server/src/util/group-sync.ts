/**
 * Group commit: many callers, few syncs. A caller is done once a sync that
 * *started after it called* has finished (a sync already running may have
 * missed its writes), so callers arriving while one sync runs share the next.
 */
export class GroupSync {
  private running: Promise<void> | null = null;
  private next: Promise<void> | null = null;

  constructor(private readonly sync: () => Promise<void>) {}

  run(): Promise<void> {
    if (!this.running) return this.start();
    this.next ??= this.running.catch(() => undefined).then(() => { this.next = null; return this.start(); });
    return this.next;
  }

  private start(): Promise<void> {
    const p = this.sync().finally(() => { if (this.running === p) this.running = null; });
    this.running = p;
    return p;
  }
}

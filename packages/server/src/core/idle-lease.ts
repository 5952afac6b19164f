/**
 * Who is using something that sleeps when idle (a service, a machine): users
 * count while they hold a lease; once none has for `idleMs`, `onIdle` runs.
 * Checked a few times per timeout (at most once a second, at least every 50 ms).
 */
export class IdleLease {
  private users = 0;
  private lastUse = Date.now();
  private timer: NodeJS.Timeout | null = null;

  /** Counts a user until the returned release (idempotent) is called. */
  acquire(): () => void {
    this.users++;
    this.lastUse = Date.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.users--;
      this.lastUse = Date.now();
    };
  }

  /** Use without a lease (a start just finished). */
  touch(): void { this.lastUse = Date.now(); }

  get inUse(): boolean { return this.users > 0; }

  /** Whether nobody has used it for `idleMs`. */
  idleFor(idleMs: number): boolean { return this.users === 0 && Date.now() - this.lastUse >= idleMs; }

  /** Starts watching: `onIdle` runs each check that finds it idle for `idleMs`. */
  watch(idleMs: number, onIdle: () => void): void {
    this.unwatch();
    this.touch();
    this.timer = setInterval(() => { if (this.idleFor(idleMs)) onIdle(); }, Math.min(1000, Math.max(50, idleMs / 4)));
    this.timer.unref();
  }

  unwatch(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

/**
 * Who is using something that sleeps when idle (a service, a machine): users
 * count while they hold a lease; once none has for `idleMs`, `onIdle` runs.
 * Checked a few times per timeout (at most once a second, at least every 50 ms).
 * It also adds up the time with at least one user: the active time billed
 * for (the idle tail before a sleep is the platform's).
 */
export class IdleLease {
  private users = 0;
  private lastUse = Date.now();
  private timer: NodeJS.Timeout | null = null;
  private activeMs = 0;
  /** When the current stretch with users began. */
  private activeSince = 0;

  /** `now`: a monotonic clock in ms (tests pass their own). */
  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Counts a user until the returned release (idempotent) is called. */
  acquire(): () => void {
    if (this.users++ === 0) this.activeSince = this.now();
    this.lastUse = Date.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.users === 0) this.activeMs += this.now() - this.activeSince;
      this.lastUse = Date.now();
    };
  }

  /** Milliseconds with at least one user since the last take (an open stretch counts up to now). */
  takeActiveMs(): number {
    const now = this.now();
    let ms = this.activeMs;
    if (this.users > 0) { ms += now - this.activeSince; this.activeSince = now; }
    this.activeMs = 0;
    return Math.round(ms);
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

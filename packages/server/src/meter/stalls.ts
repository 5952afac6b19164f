import { readFileSync } from 'node:fs';

/** How often the event loop is looked at. */
const TICK_MS = 20;
/** Linux: this thread's time on a CPU and time spent runnable, waiting for one (ns). */
const SCHEDSTAT = '/proc/thread-self/schedstat';

/**
 * The event loop's worst delays, split by cause. A timer due every TICK_MS that fires late was
 * held up either by the server itself (JavaScript running, or the thread blocked in a system
 * call: a stall, what no operation may cause) or by the host (the thread runnable, but every CPU
 * busy with other work: sandboxes, the kernel, other programs). Linux's schedstat tells the two
 * apart; elsewhere every delay counts as a stall.
 */
export class StallMonitor {
  private timer: NodeJS.Timeout | null = null;
  private last = 0;
  private lastWaitMs = 0;
  private worstStallMs = 0;
  private readonly schedstat: boolean;

  constructor() {
    this.schedstat = waitedMs() !== null;
  }

  start(): void {
    this.last = performance.now();
    this.lastWaitMs = waitedMs() ?? 0;
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref();
  }

  private tick(): void {
    const now = performance.now();
    const waited = this.schedstat ? waitedMs() ?? this.lastWaitMs : 0;
    const late = Math.max(0, now - this.last - TICK_MS);
    const stall = Math.max(0, late - (waited - this.lastWaitMs));
    this.worstStallMs = Math.max(this.worstStallMs, stall);
    this.last = now;
    this.lastWaitMs = waited;
  }

  /** The worst stall since the last call (milliseconds), then starts over. */
  take(): number {
    const worst = this.worstStallMs;
    this.worstStallMs = 0;
    return worst;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

function waitedMs(): number | null {
  try {
    return Number(readFileSync(SCHEDSTAT, 'utf8').split(' ')[1]) / 1e6;
  } catch {
    return null;
  }
}

/** Runs tasks one at a time per key (in arrival order); different keys run concurrently. */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<unknown>>();

  /** Whether a task of `key` is running or waiting. */
  busy(key: string): boolean {
    return this.tails.has(key);
  }

  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    const next = prev.then(task, task);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => { if (this.tails.get(key) === tail) this.tails.delete(key); });
    return next;
  }
}

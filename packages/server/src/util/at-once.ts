/**
 * Runs `fn` over `items` with at most `n` calls in flight. After a failure no new item starts;
 * every call in flight ends before the first failure is thrown (none is left running behind it).
 */
export async function eachAtOnce<T>(items: readonly T[], n: number, fn: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  let failed = false;
  const worker = async () => {
    while (next < items.length && !failed) {
      const i = next++;
      try { await fn(items[i], i); } catch (e) { failed = true; throw e; }
    }
  };
  const ended = await Promise.allSettled(Array.from({ length: Math.min(n, items.length) }, worker));
  for (const e of ended) if (e.status === 'rejected') throw e.reason;
}

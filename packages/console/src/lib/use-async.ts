import { useCallback, useEffect, useRef, useState } from 'preact/hooks';

export interface Async<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
}

/**
 * Runs `load` when `deps` or `refresh` change and on reload(). New `deps` name another object and
 * drop the old data (a view never shows another object's); a reload or a change of `refresh` only
 * (a newer version of the same object, such as a context's head) keeps it until the answer comes.
 * A stale answer never overwrites a newer one.
 */
export function useAsync<T>(load: () => Promise<T>, deps: unknown[], refresh: unknown[] = []): Async<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  const seq = useRef(0);
  const lastDeps = useRef<unknown[] | null>(null);
  useEffect(() => {
    const n = ++seq.current;
    const prev = lastDeps.current;
    const keep = prev !== null && prev.length === deps.length && deps.every((d, i) => Object.is(d, prev[i]));
    lastDeps.current = deps;
    setState((s) => (keep ? { ...s, loading: true } : { loading: true }));
    load().then(
      (data) => { if (n === seq.current) setState({ data, loading: false }); },
      (error: unknown) => { if (n === seq.current) setState((s) => ({ data: s.data, error, loading: false })); },
    );
  }, [...deps, ...refresh, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data: state.data, error: state.error, loading: state.loading, reload };
}

/** Calls `f` every `ms` while mounted and `on`. */
export function useInterval(f: () => void, ms: number, on = true): void {
  const ref = useRef(f);
  ref.current = f;
  useEffect(() => {
    if (!on) return;
    const t = setInterval(() => ref.current(), ms);
    return () => clearInterval(t);
  }, [ms, on]);
}

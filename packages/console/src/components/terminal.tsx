import type { Terminal as XTerm } from '@xterm/xterm';
import { useEffect, useRef } from 'preact/hooks';

export interface TermHandle {
  write(data: string): void;
  clear(): void;
  focus(): void;
}

/** Writes made before xterm.js has loaded (it is fetched on first use) wait here, then go through in order. */
export class TermBuffer implements TermHandle {
  private term: TermHandle | null = null;
  private queue: string[] = [];

  attach(t: TermHandle): void {
    this.term = t;
    for (const d of this.queue.splice(0)) t.write(d);
  }

  write(data: string): void {
    if (this.term) this.term.write(data);
    else this.queue.push(data);
  }

  clear(): void {
    this.queue = [];
    this.term?.clear();
  }

  focus(): void {
    this.term?.focus();
  }
}

/**
 * A terminal view (xterm.js, ANSI colours). `onData` receives keys typed into it; without it
 * the terminal only shows output. `onReady` hands over a handle once xterm has loaded.
 */
export function Terminal({ label, onReady, onData, rows = 18 }: {
  label: string; onReady: (t: TermHandle) => void; onData?: (data: string, t: TermHandle) => void; rows?: number;
}) {
  const el = useRef<HTMLDivElement>(null);
  const dataRef = useRef(onData);
  dataRef.current = onData;
  useEffect(() => {
    let term: XTerm | undefined;
    let ro: ResizeObserver | undefined;
    let live = true;
    void import('./xterm.js').then(({ createTerminal }) => {
      if (!live || !el.current) return;
      const made = createTerminal(el.current, !!dataRef.current);
      const t = made.term;
      term = t;
      const handle: TermHandle = { write: (d) => t.write(d), clear: () => t.reset(), focus: () => t.focus() };
      t.onData((d) => dataRef.current?.(d, handle));
      ro = new ResizeObserver(() => made.fit());
      ro.observe(el.current);
      onReady(handle);
    });
    return () => { live = false; ro?.disconnect(); term?.dispose(); };
  }, []);
  return <div ref={el} class="term-box" role="region" aria-label={label} style={{ height: `${rows * 17 + 12}px` }} />;
}

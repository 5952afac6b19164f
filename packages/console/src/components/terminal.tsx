import type { Terminal as XTerm } from '@xterm/xterm';
import { useEffect, useRef } from 'preact/hooks';

export interface TermHandle {
  write(data: string | Uint8Array): void;
  clear(): void;
  focus(): void;
}

/** Writes made before xterm.js has loaded (it is fetched on first use) wait here, then go through in order. */
export class TermBuffer implements TermHandle {
  private term: TermHandle | null = null;
  private queue: (string | Uint8Array)[] = [];

  attach(t: TermHandle): void {
    this.term = t;
    for (const d of this.queue.splice(0)) t.write(d);
  }

  write(data: string | Uint8Array): void {
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
 * the terminal only shows output. `onReady` hands over a handle once xterm has loaded, with its
 * size. `raw`: what is written is a terminal's own output (a PTY's: line ends as they come), and
 * `onResize` hears each new size.
 */
export function Terminal({ label, onReady, onData, onResize, raw = false, rows = 18 }: {
  label: string; onReady: (t: TermHandle, size: { cols: number; rows: number }) => void; onData?: (data: string, t: TermHandle) => void;
  onResize?: (cols: number, rows: number) => void; raw?: boolean; rows?: number;
}) {
  const el = useRef<HTMLDivElement>(null);
  const dataRef = useRef(onData);
  dataRef.current = onData;
  const resizeRef = useRef(onResize);
  resizeRef.current = onResize;
  useEffect(() => {
    let term: XTerm | undefined;
    let ro: ResizeObserver | undefined;
    let live = true;
    void import('./xterm.js').then(({ createTerminal }) => {
      if (!live || !el.current) return;
      const made = createTerminal(el.current, !!dataRef.current, raw);
      const t = made.term;
      term = t;
      const handle: TermHandle = { write: (d) => t.write(d), clear: () => t.reset(), focus: () => t.focus() };
      t.onData((d) => dataRef.current?.(d, handle));
      t.onResize(({ cols, rows: r }) => resizeRef.current?.(cols, r));
      ro = new ResizeObserver(() => made.fit());
      ro.observe(el.current);
      onReady(handle, { cols: t.cols, rows: t.rows });
    });
    return () => { live = false; ro?.disconnect(); term?.dispose(); };
  }, []);
  return <div ref={el} class="term-box" role="region" aria-label={label} style={{ height: `${rows * 17 + 12}px` }} />;
}

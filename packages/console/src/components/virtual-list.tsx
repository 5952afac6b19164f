import type { ComponentChildren } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';

/**
 * A list of `count` rows of `rowHeight` pixels that renders only the rows in view (plus a margin),
 * so 10,000 entries cost what 30 do. `underlay` draws behind the rows (the timeline's graph),
 * given the first and last rendered row.
 */
export function VirtualList({ count, rowHeight, height, renderRow, underlay, label, onEnd }: {
  count: number;
  rowHeight: number;
  /** CSS height of the scrolling box. */
  height: string;
  renderRow: (i: number) => ComponentChildren;
  underlay?: (first: number, last: number) => ComponentChildren;
  label: string;
  /** Called when the last row comes into view (to load more). */
  onEnd?: () => void;
}) {
  const box = useRef<HTMLDivElement>(null);
  const [top, setTop] = useState(0);
  const [view, setView] = useState(600);
  useLayoutEffect(() => {
    const el = box.current;
    if (!el) return;
    const measure = () => setView(el.clientHeight || 600);
    measure();
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  const overscan = 8;
  const first = Math.max(0, Math.floor(top / rowHeight) - overscan);
  const last = Math.min(count - 1, Math.ceil((top + view) / rowHeight) + overscan);
  useEffect(() => { if (onEnd && count > 0 && last >= count - 1) onEnd(); }, [last, count]);
  const rows = [];
  for (let i = first; i <= last; i++) {
    rows.push(<div key={i} role="listitem" class="vrow" style={{ top: `${i * rowHeight}px`, height: `${rowHeight}px` }}>{renderRow(i)}</div>);
  }
  return (
    <div ref={box} class="vlist" style={{ height }} onScroll={(e) => setTop(e.currentTarget.scrollTop)} aria-label={label} role="list">
      <div class="vlist-inner" style={{ height: `${count * rowHeight}px` }}>
        {underlay?.(first, last)}
        {rows}
      </div>
    </div>
  );
}

/** Small hand-made SVG charts: bars over days, and horizontal bars for top lists. Each carries its numbers as text too. */

export function DayBars({ title, days, values, format }: { title: string; days: string[]; values: number[]; format: (n: number) => string }) {
  const w = 560;
  const h = 140;
  const pad = { l: 44, r: 8, t: 10, b: 22 };
  const max = Math.max(...values, 0);
  const bw = (w - pad.l - pad.r) / Math.max(days.length, 1);
  const y = (v: number) => pad.t + (h - pad.t - pad.b) * (1 - (max ? v / max : 0));
  const total = values.reduce((a, b) => a + b, 0);
  const every = Math.ceil(days.length / 8);
  return (
    <figure class="chart">
      <figcaption><span>{title}</span> <b>{format(total)}</b></figcaption>
      <svg viewBox={`0 0 ${w} ${h}`} role="img" aria-label={`${title} per day: total ${format(total)}, peak ${format(max)}`}>
        <line x1={pad.l} x2={w - pad.r} y1={h - pad.b} y2={h - pad.b} class="axis" />
        <text x={pad.l - 6} y={pad.t + 8} class="tick" text-anchor="end">{format(max)}</text>
        <text x={pad.l - 6} y={h - pad.b} class="tick" text-anchor="end">0</text>
        {values.map((v, i) => (
          <rect key={days[i]} x={pad.l + i * bw + 1} width={Math.max(bw - 2, 1)} y={y(v)} height={h - pad.b - y(v)} class="bar">
            <title>{`${days[i]}: ${format(v)}`}</title>
          </rect>
        ))}
        {days.map((d, i) => (i % every === 0
          ? <text key={d} x={pad.l + i * bw + bw / 2} y={h - 6} class="tick" text-anchor="middle">{d.slice(5)}</text>
          : null))}
      </svg>
    </figure>
  );
}

export function TopBars({ title, rows, format, href }: { title: string; rows: [string, number][]; format: (n: number) => string; href?: (k: string) => string }) {
  const max = Math.max(...rows.map((r) => r[1]), 0);
  return (
    <figure class="chart top-list">
      <figcaption>{title}</figcaption>
      {rows.length === 0 ? <p class="muted">Nothing yet.</p> : (
        <ol class="topbars">
          {rows.map(([k, v]) => (
            <li key={k}>
              <span class="label">{href ? <a href={href(k)}>{k}</a> : k}</span>
              <span class="track" aria-hidden="true"><span class="fill" style={{ width: `${max ? (100 * v) / max : 0}%` }} /></span>
              <span class="num">{format(v)}</span>
            </li>
          ))}
        </ol>
      )}
    </figure>
  );
}

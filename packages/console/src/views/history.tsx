import type { Context, Version } from '@shellbase/protocol';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { Confirm } from '../components/dialog.js';
import { act, ErrorBox } from '../components/errors.js';
import { VirtualList } from '../components/virtual-list.js';
import { ago, bytes, exact, shortId } from '../lib/format.js';
import { layout, mergeSource, type Chain, type Graph } from '../lib/graph.js';
import { href } from '../lib/router.js';
import { DiffView } from './diff.js';

const PAGE = 100;
const ROW = 44;
const LANE = 16;
/** How many other contexts the graph looks at for forks (the most recently active). */
const RELATED = 12;

/** A context's history: timeline with forks and merges as a graph, diff of any two versions, reset. */
export function HistoryView({ ctx, onChanged }: { ctx: Context; onChanged: () => void }) {
  const [own, setOwn] = useState<Version[]>([]);
  const [complete, setComplete] = useState(false);
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [related, setRelated] = useState<Chain[]>([]);
  const [showForks, setShowForks] = useState(true);
  const [picked, setPicked] = useState<string[]>([]);
  const [diff, setDiff] = useState<{ from?: string; to: string } | null>(null);
  const [resetTo, setResetTo] = useState<Version | null>(null);

  async function loadPage(before?: string) {
    setLoading(true);
    try {
      const page = await sb.context(ctx.name).versions({ limit: PAGE, before });
      setOwn((o) => (before ? [...o, ...page] : page));
      setComplete(page.length < PAGE || page.at(-1)?.parent === null);
      setError(null);
    } catch (err) { setError(err); } finally { setLoading(false); }
  }

  /** A new head (a run here, or anyone's change): the newest page again, joined onto what is loaded when it reaches it. */
  async function loadNewer() {
    try {
      const page = await sb.context(ctx.name).versions({ limit: PAGE });
      setOwn((o) => {
        const i = page.findIndex((v) => v.id === o[0]?.id);
        if (i >= 0) return [...page.slice(0, i), ...o];
        setComplete(page.length < PAGE || page.at(-1)?.parent === null);
        return page;
      });
    } catch (err) { setError(err); }
  }

  useEffect(() => { setOwn([]); setComplete(false); setPicked([]); setDiff(null); void loadPage(); }, [ctx.name]);
  useEffect(() => { if (own.length > 0 && own[0]!.id !== ctx.head) void loadNewer(); }, [ctx.head]);

  // Related contexts: ones that share a loaded version, or that a merge names.
  useEffect(() => {
    if (!showForks || own.length === 0) { setRelated([]); return; }
    let live = true;
    const ids = new Set(own.map((v) => v.id));
    const merged = new Set(own.map(mergeSource).filter((s): s is string => !!s));
    void sb.contexts.list().then(async (all) => {
      const others = all.filter((c) => c.name !== ctx.name)
        .sort((a, b) => Number(merged.has(b.name)) - Number(merged.has(a.name)) || b.updatedAt.localeCompare(a.updatedAt))
        .slice(0, RELATED);
      const chains = await Promise.all(others.map(async (c) => ({ name: c.name, versions: await sb.context(c.name).versions({ limit: PAGE }).catch(() => []) })));
      if (live) setRelated(chains.filter((c) => merged.has(c.name) || c.versions.some((v) => ids.has(v.id))));
    }).catch(() => { /* the graph then shows this context alone */ });
    return () => { live = false; };
  }, [own, showForks]);

  const graph = useMemo(() => layout([{ name: ctx.name, versions: own }, ...related], complete), [own, related, complete]);
  const byId = useMemo(() => new Map(graph.rows.map((r) => [r.v.id, r.v])), [graph]);

  function toggle(id: string) {
    setPicked((p) => (p.includes(id) ? p.filter((x) => x !== id) : [...p.slice(-1), id]));
  }
  function openPicked() {
    const [a, b] = picked.map((id) => byId.get(id)!).sort((x, y) => x.createdAt.localeCompare(y.createdAt));
    if (a && b) setDiff({ from: a.id, to: b.id });
  }

  const gw = Math.max(1, graph.lanes.length) * LANE + 12;
  return (
    <section class="history" aria-label="History">
      <div class="bar">
        <button type="button" class="primary" disabled={picked.length !== 2} onClick={openPicked}
          title="Tick two versions on the timeline">Diff selected ({picked.length}/2)</button>
        <label class="check"><input type="checkbox" checked={showForks} onChange={(e) => setShowForks(e.currentTarget.checked)} /> Show forks and merges</label>
        <Legend lanes={graph.lanes} />
        <span class="muted">{own.length} version{own.length === 1 ? '' : 's'} loaded{complete ? ' (all)' : ''}</span>
      </div>
      <ErrorBox error={error} />
      <div class="timeline-head" style={{ paddingLeft: `${gw + 1}px` }} aria-hidden="true">
        <span>Cause</span><span class="num">Bytes</span><span>Exit</span><span>When</span><span>Version</span><span />
      </div>
      <VirtualList label="Versions, newest first" count={graph.rows.length} rowHeight={ROW} height={`min(${Math.max(graph.rows.length, 1) * ROW + 2}px, 62vh)`}
        underlay={(f, l) => <GraphSvg graph={graph} first={f} last={l} width={gw} />}
        onEnd={() => { if (!complete && !loading && own.length) void loadPage(own.at(-1)!.id); }}
        renderRow={(i) => {
          const r = graph.rows[i]!;
          const v = r.v;
          const mine = r.lane === 0;
          const code = v.cause.exitCode;
          return (
            <div class={`version${picked.includes(v.id) ? ' picked' : ''}`} style={{ paddingLeft: `${gw}px` }} data-version={v.id}>
              <input type="checkbox" aria-label={`Select ${v.id} for a diff`} checked={picked.includes(v.id)} onChange={() => toggle(v.id)} />
              <span class="cause">
                <span class={`kind kind-${v.cause.kind}`}>{v.cause.kind}</span>
                {r.heads.map((h) => <span key={h} class="head-tag" title={`head of ${h}`}>{h}</span>)}
                <code class="command" title={v.cause.command}>{v.cause.command ?? ''}</code>
                {v.cause.mounts?.map((m) => (
                  <span key={m.path} class="mount-tag" title={`${m.context} mounted ${m.readOnly ? 'read-only' : 'writable'} at ${m.path}, at version ${m.version}${m.wrote ? `; its writes became ${m.wrote}` : ''}`}>
                    {m.context}:{m.path}
                  </span>
                ))}
                {v.cause.mountedBy && (
                  <span class="mount-tag" title={`written through its mount at ${v.cause.mountedBy.path} in ${v.cause.mountedBy.context}, with ${v.cause.mountedBy.version}`}>
                    from {v.cause.mountedBy.context}
                  </span>
                )}
              </span>
              <span class="num">{bytes(v.bytes)}</span>
              <span class={code === undefined ? 'muted' : code === 0 ? 'ok' : 'bad'} title={code === undefined ? 'no exit code: only queries and service runs have one' : 'exit code'}>{code ?? '–'}</span>
              <span title={exact(v.createdAt)}>{ago(v.createdAt)}</span>
              <code class="vid" title={v.id}>{shortId(v.id)}</code>
              <span class="row-actions">
                <a href={href('contexts', ctx.name, 'files', { version: v.id })} title="Browse the files at this version">Files</a>
                {v.parent && <button type="button" class="link" onClick={() => setDiff({ from: v.parent!, to: v.id })}>Changes</button>}
                {mine && v.id !== ctx.head && <button type="button" class="link" onClick={() => setResetTo(v)}>Reset</button>}
              </span>
            </div>
          );
        }} />
      {graph.more && <div class="row"><button type="button" disabled={loading} onClick={() => void loadPage(own.at(-1)!.id)}>{loading ? 'Loading…' : `Load ${PAGE} older`}</button></div>}
      {diff && <DiffView ctx={ctx.name} from={diff.from} to={diff.to} onClose={() => setDiff(null)} />}
      {resetTo && <Confirm title={`Reset ${ctx.name}?`} danger="Reset"
        body={<p>The head becomes a new version with the content of <code>{resetTo.id}</code> ({resetTo.cause.command ?? resetTo.cause.kind}). Nothing is lost: the current head stays in the history.</p>}
        onNo={() => setResetTo(null)}
        onYes={async () => { const v = resetTo; setResetTo(null); await act(() => sb.context(ctx.name).reset(v.id), `Reset to ${shortId(v.id)}`); onChanged(); }} />}
    </section>
  );
}

const COLORS = ['var(--lane0)', 'var(--lane1)', 'var(--lane2)', 'var(--lane3)', 'var(--lane4)', 'var(--lane5)'];
const color = (lane: number) => COLORS[lane % COLORS.length];

function Legend({ lanes }: { lanes: string[] }) {
  if (lanes.length < 2) return null;
  return (
    <span class="legend" aria-label="Lanes of the graph">
      {lanes.map((l, i) => <span key={l}><svg width="10" height="10" aria-hidden="true"><circle cx="5" cy="5" r="4" fill={color(i)} /></svg> {l}</span>)}
    </span>
  );
}

/** The graph behind the visible rows: dots per version, a line to each parent, dashed lines for merges. */
function GraphSvg({ graph, first, last, width }: { graph: Graph; first: number; last: number; width: number }) {
  const x = (lane: number) => 10 + lane * LANE;
  const y = (row: number) => row * ROW + ROW / 2;
  const height = Math.max(graph.rows.length, 1) * ROW;
  const edges = graph.edges.filter((e) => e.to >= first && e.from <= last);
  const lastRow = graph.rows.length - 1;
  return (
    <svg class="graph" width={width} height={height} aria-hidden="true" data-edges={graph.edges.length} data-lanes={graph.lanes.length}>
      {edges.map((e) => {
        const [x1, y1, x2, y2] = [x(e.fromLane), y(e.from), x(e.toLane), y(e.to)];
        const d = e.kind === 'merge' || x1 === x2
          ? `M${x1},${y1} L${x2},${y2}`
          : `M${x1},${y1} L${x1},${y2 - ROW / 2} Q${x1},${y2} ${x2},${y2}`;
        return <path key={`${e.from}-${e.to}-${e.kind}`} d={d} class={`edge ${e.kind}`} stroke={color(e.kind === 'merge' ? e.toLane : e.fromLane)} />;
      })}
      {graph.more && lastRow >= first && <path d={`M${x(0)},${y(lastRow)} L${x(0)},${height}`} class="edge more" stroke={color(0)} />}
      {graph.rows.slice(first, last + 1).map((r, k) => (
        <circle key={r.v.id} cx={x(r.lane)} cy={y(first + k)} r={r.v.cause.kind === 'merge' ? 6 : 4.5}
          fill={r.heads.length ? color(r.lane) : 'var(--bg)'} stroke={color(r.lane)} stroke-width="2" />
      ))}
    </svg>
  );
}

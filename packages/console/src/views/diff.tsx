import type { DiffChange } from '@shellbase/protocol';
import { useEffect, useRef, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { ErrorBox } from '../components/errors.js';
import { bytes, shortId } from '../lib/format.js';
import { useAsync } from '../lib/use-async.js';

/** The paths that differ between two versions; a path opens its unified diff, coloured by language. */
export function DiffView({ ctx, from, to, onClose }: { ctx: string; from?: string; to: string; onClose: () => void }) {
  const changes = useAsync(() => sb.context(ctx).diff({ from, to }).then((r) => r.changes), [ctx, from, to]);
  const [open, setOpen] = useState<DiffChange | null>(null);
  const ref = useRef<HTMLElement>(null);
  useEffect(() => { ref.current?.scrollIntoView({ block: 'nearest' }); ref.current?.focus(); }, [from, to]);
  useEffect(() => { setOpen(null); }, [from, to]);
  const files = changes.data ?? [];
  return (
    <section class="panel diff" ref={ref} tabIndex={-1} aria-labelledby="diff-title">
      <div class="bar">
        <h2 id="diff-title">Changes {from ? <code>{shortId(from)}</code> : 'parent'} → <code>{shortId(to)}</code></h2>
        <button type="button" class="ghost" onClick={onClose} aria-label="Close the diff">×</button>
      </div>
      <ErrorBox error={changes.error} />
      {changes.loading && <p class="muted">Comparing…</p>}
      {changes.data && files.length === 0 && <p class="muted">No paths differ.</p>}
      <div class="diff-body">
        <ul class="changes" aria-label="Changed paths">
          {files.map((c) => (
            <li key={c.path}>
              <button type="button" class={`change${open?.path === c.path ? ' current' : ''}`} aria-pressed={open?.path === c.path}
                onClick={() => setOpen(c)} disabled={c.type !== 'file'}>
                <span class={`ck ck-${c.kind}`}>{c.kind === 'added' ? 'A' : c.kind === 'deleted' ? 'D' : 'M'}</span>
                <span class="path">{c.path}</span>
                <span class="muted">{c.type === 'file' ? bytes(c.size) : c.type}</span>
              </button>
            </li>
          ))}
        </ul>
        {open && <Patch ctx={ctx} from={from} to={to} change={open} />}
      </div>
    </section>
  );
}

interface Line { kind: ' ' | '+' | '-' | '@' | 'h'; text: string; html?: string; old?: number; new?: number }

function Patch({ ctx, from, to, change }: { ctx: string; from?: string; to: string; change: DiffChange }) {
  const patch = useAsync(async () => {
    const [r, hl] = await Promise.all([sb.context(ctx).diff({ from, to, path: change.path }), import('../lib/highlight.js')]);
    return r.patch ? colour(parse(r.patch), hl.highlightLines, hl.languageOf(change.path)) : null;
  }, [ctx, from, to, change.path]);
  return (
    <div class="patch" aria-label={`Diff of ${change.path}`}>
      <ErrorBox error={patch.error} />
      {patch.loading && <p class="muted">Loading the diff…</p>}
      {!patch.loading && patch.data === null && <p class="binary"><strong>binary</strong>: no text diff ({change.kind}, {bytes(change.size)})</p>}
      {patch.data && (
        <table class="udiff">
          <tbody>
            {patch.data.map((l, i) => (
              <tr key={i} class={`l-${l.kind === ' ' ? 'ctx' : l.kind === '+' ? 'add' : l.kind === '-' ? 'del' : l.kind === '@' ? 'hunk' : 'file'}`}>
                <td class="ln">{l.old ?? ''}</td>
                <td class="ln">{l.new ?? ''}</td>
                <td class="sign">{l.kind === ' ' || l.kind === 'h' || l.kind === '@' ? '' : l.kind}</td>
                {l.html !== undefined ? <td class="code hljs" dangerouslySetInnerHTML={{ __html: l.html }} /> : <td class="code">{l.text}</td>}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

/** Unified diff text into lines with old and new line numbers. */
export function parse(patch: string): Line[] {
  const out: Line[] = [];
  let o = 0;
  let n = 0;
  for (const raw of patch.replace(/\n$/, '').split('\n')) {
    const h = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(raw);
    if (h) { o = Number(h[1]); n = Number(h[2]); out.push({ kind: '@', text: raw }); continue; }
    if (raw.startsWith('--- ') || raw.startsWith('+++ ')) { out.push({ kind: 'h', text: raw }); continue; }
    if (raw.startsWith('\\')) { out.push({ kind: '@', text: raw }); continue; }
    const k = raw[0];
    if (k === '+') out.push({ kind: '+', text: raw.slice(1), new: n++ });
    else if (k === '-') out.push({ kind: '-', text: raw.slice(1), old: o++ });
    else out.push({ kind: ' ', text: raw.slice(1), old: o++, new: n++ });
  }
  return out;
}

/** Colours each side of each hunk as one block (so strings and comments spanning lines stay right). */
function colour(lines: Line[], hl: (l: string[], lang: string | undefined) => string[], lang: string | undefined): Line[] {
  if (!lang) return lines;
  let i = 0;
  while (i < lines.length) {
    if (lines[i]!.kind !== ' ' && lines[i]!.kind !== '+' && lines[i]!.kind !== '-') { i++; continue; }
    let j = i;
    while (j < lines.length && [' ', '+', '-'].includes(lines[j]!.kind)) j++;
    const hunk = lines.slice(i, j);
    const oldHtml = hl(hunk.filter((l) => l.kind !== '+').map((l) => l.text), lang);
    const newHtml = hl(hunk.filter((l) => l.kind !== '-').map((l) => l.text), lang);
    let a = 0;
    let b = 0;
    for (const l of hunk) {
      if (l.kind === '-') l.html = oldHtml[a++];
      else if (l.kind === '+') l.html = newHtml[b++];
      else { l.html = newHtml[b++]; a++; }
    }
    i = j;
  }
  return lines;
}

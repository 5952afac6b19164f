import type { DirEntry } from '@shellbase/protocol';
import { useEffect, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { act, ErrorBox, notify } from '../components/errors.js';
import { bytes, shortId } from '../lib/format.js';
import { join, save } from '../lib/transfer.js';
import { useAsync } from '../lib/use-async.js';

/** Bytes read for a preview (a Range request); a larger file previews its start. */
const PREVIEW = 1024 * 1024;
const HIGHLIGHT = 256 * 1024;
const IMAGE = /\.(png|jpe?g|gif|webp|svg|bmp|ico|avif)$/i;

type Preview =
  | { kind: 'image'; url: string }
  | { kind: 'text'; text: string; truncated: boolean; html?: string[] }
  | { kind: 'binary' };

/** One file: preview (text, coloured, or image), download, edit and save (a new version), delete. */
export function FilePreview({ ctx, version, head, atHead, dir, entry, onClose, onSaved, onDelete }: {
  /** `version` undefined: the head (`head` as last seen: a new one reloads the preview, a draft stays). */
  ctx: string; version: string | undefined; head: string; atHead: boolean; dir: string; entry: DirEntry | null;
  onClose: () => void; onSaved: () => void; onDelete?: () => void;
}) {
  const path = entry ? join(dir === '/' ? '' : dir, entry.name) : '';
  const preview = useAsync(async (): Promise<Preview | null> => {
    if (!entry) return null;
    if (entry.type !== 'file') return { kind: 'binary' };
    if (IMAGE.test(entry.name) && entry.size <= 32 * 1024 * 1024) {
      const blob = await (await sb.context(ctx).files.open(path, { version })).blob();
      const type = /\.svg$/i.test(entry.name) ? 'image/svg+xml' : blob.type;
      return { kind: 'image', url: URL.createObjectURL(new Blob([blob], { type })) };
    }
    const res = await sb.context(ctx).files.open(path, { version, range: entry.size > PREVIEW ? [0, PREVIEW - 1] : undefined });
    const buf = new Uint8Array(await res.arrayBuffer());
    const text = decodeText(buf);
    if (text === null) return { kind: 'binary' };
    const p: Preview = { kind: 'text', text, truncated: entry.size > buf.length };
    if (text.length <= HIGHLIGHT) {
      const hl = await import('../lib/highlight.js');
      const lang = hl.languageOf(entry.name);
      if (lang) p.html = hl.highlightLines(text.split('\n'), lang);
    }
    return p;
  }, [ctx, path, version], [head]);
  useEffect(() => () => { const p = preview.data; if (p?.kind === 'image') URL.revokeObjectURL(p.url); }, [preview.data]);

  const [editing, setEditing] = useState(entry === null);
  const [name, setName] = useState('');
  const [draft, setDraft] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [saving, setSaving] = useState(false);
  const p = preview.data;
  const editable = atHead && p?.kind === 'text' && !p.truncated;

  async function saveFile(e: Event) {
    e.preventDefault();
    setSaving(true);
    setError(null);
    try {
      const target = entry ? path : join(dir === '/' ? '' : dir, name.trim());
      const r = await sb.context(ctx).files.write(target, new Blob([draft]), { mode: entry ? entry.mode & 0o7777 : undefined });
      notify('ok', `Saved ${target}: version ${shortId(r.version)}`);
      setEditing(false);
      onSaved();
    } catch (err) { setError(err); } finally { setSaving(false); }
  }

  return (
    <aside class="panel preview" aria-label={entry ? `File ${path}` : 'New file'}>
      <div class="bar">
        <h2 class="path">{entry ? path : `New file in ${dir}`}</h2>
        {entry && <span class="muted">{bytes(entry.size)} · {(entry.mode & 0o7777).toString(8)}</span>}
        <span class="spacer" />
        {entry && entry.type === 'file' && <button type="button" onClick={() => act(async () => save(await (await sb.context(ctx).files.open(path, { version })).blob(), entry.name))}>Download</button>}
        {entry && editable && !editing && <button type="button" onClick={() => { setDraft((p as { text: string }).text); setEditing(true); }}>Edit</button>}
        {onDelete && !editing && <button type="button" class="danger-ghost" onClick={onDelete}>Delete</button>}
        <button type="button" class="ghost" aria-label="Close the preview" onClick={onClose}>×</button>
      </div>
      <ErrorBox error={preview.error} />
      {editing ? (
        <form class="form editor" onSubmit={saveFile}>
          {!entry && (<>
            <label for="new-file-name">File name</label>
            <input id="new-file-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required autofocus />
          </>)}
          <label for="file-text" class="sr-only">Content</label>
          <textarea id="file-text" spellcheck={false} value={draft} onInput={(e) => setDraft(e.currentTarget.value)}
            onKeyDown={(e) => { if ((e.ctrlKey || e.metaKey) && e.key === 's') { e.preventDefault(); e.currentTarget.form?.requestSubmit(); } }} />
          <ErrorBox error={error} />
          <div class="row end">
            <span class="muted">Saving writes a new version (Ctrl+S).</span>
            <button type="button" onClick={() => (entry ? setEditing(false) : onClose())}>Cancel</button>
            <button type="submit" class="primary" disabled={saving}>{saving ? 'Saving…' : 'Save'}</button>
          </div>
        </form>
      ) : (
        <div class="preview-body">
          {preview.loading && <p class="muted">Loading…</p>}
          {p?.kind === 'image' && <img src={p.url} alt={entry?.name ?? ''} />}
          {p?.kind === 'binary' && <p class="binary"><strong>binary</strong>: no preview ({entry?.type === 'file' ? bytes(entry.size) : entry?.type}{entry?.target ? ` → ${entry.target}` : ''})</p>}
          {p?.kind === 'text' && (<>
            {p.truncated && <p class="tag warn">Showing the first {bytes(PREVIEW)}: download the whole file.</p>}
            {p.html
              ? <pre class="code hljs" aria-label="Content">{p.html.map((h, i) => <div key={i} dangerouslySetInnerHTML={{ __html: h || ' ' }} />)}</pre>
              : <pre class="code" aria-label="Content">{p.text}</pre>}
          </>)}
        </div>
      )}
    </aside>
  );
}

/** UTF-8 text, or null for binary (a NUL byte in the first 8 KiB, or bytes that are not UTF-8). */
export function decodeText(buf: Uint8Array): string | null {
  if (buf.subarray(0, 8192).includes(0)) return null;
  try {
    // `stream: true` leaves a character cut by a Range read at the end alone.
    return new TextDecoder('utf-8', { fatal: true }).decode(buf, { stream: true });
  } catch {
    return null;
  }
}

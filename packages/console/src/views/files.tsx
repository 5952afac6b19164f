import type { Context, DirEntry } from '@shellbase/protocol';
import { useMemo, useRef, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { Confirm } from '../components/dialog.js';
import { act, ErrorBox, notify } from '../components/errors.js';
import { VirtualList } from '../components/virtual-list.js';
import { ago, bytes, exact, shortId } from '../lib/format.js';
import { go, href } from '../lib/router.js';
import { droppedFiles, join, save, tarDirectory, upload } from '../lib/transfer.js';
import { useAsync } from '../lib/use-async.js';
import { FilePreview } from './file-preview.js';

const ROW = 32;
/** Entry icons as SVG (emoji fonts are not everywhere). */
const PATHS: Record<string, string> = {
  dir: 'M1.5 3.5h5l1.5 1.5h6.5v8.5h-13z',
  file: 'M3.5 1.5h6l3 3v10h-9z M9.5 1.5v3h3',
  symlink: 'M3.5 1.5h6l3 3v10h-9z M6 11l4-4 M7 7h3v3',
  other: 'M8 2.5a5.5 5.5 0 1 0 0.01 0z',
};
const Icon = ({ type }: { type: string }) => (
  <svg class={`icon icon-${type}`} width="16" height="16" viewBox="0 0 16 16" aria-hidden="true"><path d={PATHS[type] ?? PATHS.other} /></svg>
);

/** A directory at a version (head by default): a virtualised list, preview, download, upload by drop, edit. */
export function FilesView({ ctx, version, path, onChanged }: { ctx: Context; version?: string; path: string; onChanged: () => void }) {
  // Without a version the calls read the head as the server has it (ctx.head may lag a moment behind).
  const at = version;
  const atHead = version === undefined || version === ctx.head;
  const dir = useAsync(() => sb.context(ctx.name).files.list(path, { version: at }), [ctx.name, path, at], [ctx.head]);
  // A selection belongs to the directory (and version) it was made in.
  const here = `${ctx.name}\n${path}\n${version ?? ''}`;
  const [sel, setSel] = useState<{ here: string; entry: DirEntry | null } | null>(null);
  const selected = sel?.here === here ? sel.entry : null;
  const newFile = sel?.here === here && sel.entry === null;
  const setSelected = (entry: DirEntry | null) => setSel(entry ? { here, entry } : null);
  const setNewFile = (on: boolean) => setSel(on ? { here, entry: null } : null);
  const [dragging, setDragging] = useState(false);
  const [busy, setBusy] = useState<string | null>(null);
  const [deleting, setDeleting] = useState<DirEntry | null>(null);
  const picker = useRef<HTMLInputElement>(null);
  const entries = useMemo(() => [...(dir.data ?? [])].sort((a, b) =>
    Number(b.type === 'dir') - Number(a.type === 'dir') || a.name.localeCompare(b.name)), [dir.data]);
  const nav = (p: string, v = version) => { setSelected(null); go(href('contexts', ctx.name, 'files', { path: p, version: v })); };
  const crumbs = path.split('/').filter(Boolean);

  async function put(files: { path: string; file: File }[]) {
    if (files.length === 0) return;
    if (!atHead) { notify('error', new Error('Uploads go to the head: open the head first.')); return; }
    setBusy(`Uploading ${files.length} file${files.length === 1 ? '' : 's'}…`);
    const v = await act(() => upload(ctx.name, path, files), (ver) => `Uploaded: version ${shortId(ver)}`);
    setBusy(null);
    if (v) { onChanged(); dir.reload(); }
  }

  async function downloadDir() {
    setBusy('Packing…');
    await act(async () => {
      const blob = await tarDirectory(ctx.name, path, at ?? ctx.head, (n, b) => setBusy(`Packing: ${n} files, ${bytes(b)}`));
      save(blob, `${ctx.name}${path === '/' ? '' : path.replace(/\//g, '_')}-${shortId(at ?? ctx.head)}.tar`);
    }, 'Archive ready');
    setBusy(null);
  }

  return (
    <section class="files" aria-label="Files">
      <div class="bar">
        <nav class="crumbs" aria-label="Path">
          <button type="button" class="link" onClick={() => nav('/')}>/</button>
          {crumbs.map((c, i) => (
            <span key={i}>{i > 0 && '/'}<button type="button" class="link" onClick={() => nav(`/${crumbs.slice(0, i + 1).join('/')}`)}>{c}</button></span>
          ))}
        </nav>
        <span class={atHead ? 'muted' : 'tag warn'}>{atHead ? 'at head' : <>at version <code>{shortId(version ?? '')}</code></>}</span>
        {!atHead && <button type="button" onClick={() => nav(path, undefined)}>Go to head</button>}
        <span class="spacer" />
        <button type="button" onClick={() => picker.current?.click()} disabled={!atHead}>Upload…</button>
        <button type="button" onClick={() => setNewFile(true)} disabled={!atHead}>New file</button>
        <button type="button" onClick={downloadDir} title="A tar of this directory, built in the browser">Download .tar</button>
        <input ref={picker} type="file" multiple hidden aria-label="Files to upload"
          onChange={(e) => { const fs = [...(e.currentTarget.files ?? [])]; e.currentTarget.value = ''; void put(fs.map((file) => ({ path: file.name, file }))); }} />
      </div>
      {busy && <p class="muted" role="status">{busy}</p>}
      <ErrorBox error={dir.error} />
      <div class="files-body">
        <div class={`dropzone${dragging ? ' over' : ''}`} data-testid="dropzone"
          onDragOver={(e) => { e.preventDefault(); if (e.dataTransfer) e.dataTransfer.dropEffect = atHead ? 'copy' : 'none'; setDragging(true); }}
          onDragLeave={() => setDragging(false)}
          onDrop={async (e) => { e.preventDefault(); setDragging(false); if (e.dataTransfer) await put(await droppedFiles(e.dataTransfer)); }}>
          <div class="entries-head" aria-hidden="true"><span>Name</span><span class="num">Size</span><span>Mode</span><span>Modified</span></div>
          {path !== '/' && <button type="button" class="entry up" onClick={() => nav(path.split('/').slice(0, -1).join('/') || '/')}><span>↑ ..</span></button>}
          {dir.loading && !dir.data && <p class="muted">Loading…</p>}
          {dir.data && entries.length === 0 && <p class="muted">Empty directory{atHead ? ': drop files here to upload them' : ''}.</p>}
          <VirtualList label={`Entries of ${path} (${entries.length})`} count={entries.length} rowHeight={ROW} height={`min(${Math.max(entries.length, 1) * ROW + 2}px, 60vh)`}
            renderRow={(i) => {
              const e = entries[i]!;
              const p = join(path === '/' ? '' : path, e.name);
              return (
                <button type="button" class={`entry${selected?.name === e.name ? ' current' : ''}`} aria-pressed={selected?.name === e.name}
                  onClick={() => (e.type === 'dir' ? nav(p) : setSelected(e))} title={e.type === 'symlink' ? `→ ${e.target ?? ''}` : p}>
                  <span class="name"><Icon type={e.type} /> {e.name}{e.type === 'dir' ? '/' : ''}</span>
                  <span class="num">{e.type === 'file' ? bytes(e.size) : ''}</span>
                  <span class="mode">{(e.mode & 0o7777).toString(8).padStart(4, '0')}</span>
                  <span title={exact(e.mtime)}>{ago(e.mtime)}</span>
                </button>
              );
            }} />
          {atHead && <p class="muted drop-hint">Drop files or folders here to upload them into {path} (several files make one version).</p>}
        </div>
        {(selected || newFile) && (
          <FilePreview key={`${version ?? ''}:${path}:${newFile ? '' : selected?.name}`} ctx={ctx.name} version={at} head={ctx.head} atHead={atHead}
            dir={path} entry={newFile ? null : selected}
            onClose={() => { setSelected(null); setNewFile(false); }}
            onDelete={selected && atHead ? () => setDeleting(selected) : undefined}
            onSaved={() => { if (newFile) setNewFile(false); onChanged(); dir.reload(); }} />
        )}
      </div>
      {deleting && <Confirm title={`Delete ${deleting.name}?`} danger="Delete"
        body={<p>This writes a new version without <code>{join(path, deleting.name)}</code>{deleting.type === 'dir' ? ' and everything below it' : ''}. Earlier versions keep it.</p>}
        onNo={() => setDeleting(null)}
        onYes={async () => {
          const e = deleting;
          setDeleting(null);
          const r = await act(() => sb.context(ctx.name).files.remove(join(path, e.name), { recursive: e.type === 'dir' }), (x) => `Deleted: version ${shortId(x.version)}`);
          if (r) { setSelected(null); onChanged(); dir.reload(); }
        }} />}
    </section>
  );
}

import type { Context } from '@shellbase/protocol';
import { useMemo, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { Confirm, Dialog } from '../components/dialog.js';
import { act, ErrorBox } from '../components/errors.js';
import { ago, bytes, exact } from '../lib/format.js';
import { go, href } from '../lib/router.js';
import { useAsync } from '../lib/use-async.js';

/** Every context of the tenant: search, size (its head's layers), last activity; create, fork, delete. */
export function ContextsView() {
  const list = useAsync(async () => {
    const [contexts, usage] = await Promise.all([sb.contexts.list(), sb.usage({ groupBy: 'context' }).catch(() => null)]);
    const size = new Map((usage?.items ?? []).map((i) => [i.key, i.bytesStored]));
    return { contexts, size };
  }, []);
  const [q, setQ] = useState('');
  const [creating, setCreating] = useState<{ from?: string } | null>(null);
  const [deleting, setDeleting] = useState<string | null>(null);
  const shown = useMemo(() => {
    const all = [...(list.data?.contexts ?? [])].sort((a, b) => b.updatedAt.localeCompare(a.updatedAt));
    const needle = q.trim().toLowerCase();
    return needle ? all.filter((c) => c.name.toLowerCase().includes(needle) || c.image.toLowerCase().includes(needle)) : all;
  }, [list.data, q]);

  return (
    <section aria-labelledby="contexts-title">
      <div class="bar">
        <h1 id="contexts-title">Contexts</h1>
        <input type="search" aria-label="Search contexts" placeholder="Search by name or image" value={q}
          onInput={(e) => setQ(e.currentTarget.value)} />
        <button type="button" class="primary" onClick={() => setCreating({})}>New context</button>
      </div>
      <ErrorBox error={list.error} />
      {list.loading && !list.data && <p class="muted">Loading…</p>}
      {list.data && (shown.length === 0
        ? <p class="muted">{q ? 'No context matches.' : 'No contexts yet: create one.'}</p>
        : (
          <div class="table-wrap">
            <table class="list">
              <thead><tr><th>Name</th><th>Image</th><th class="num">Size</th><th>Last activity</th><th><span class="sr-only">Actions</span></th></tr></thead>
              <tbody>
                {shown.map((c) => (
                  <tr key={c.name}>
                    <td><a href={href('contexts', c.name)}>{c.name}</a></td>
                    <td>{c.image}</td>
                    <td class="num" title="bytes of the layers its head holds (from usage; — until it has usage)">{bytes(list.data!.size.get(c.name))}</td>
                    <td title={exact(c.updatedAt)}>{ago(c.updatedAt)}</td>
                    <td class="actions">
                      <button type="button" onClick={() => setCreating({ from: c.name })}>Fork</button>
                      <button type="button" class="danger-ghost" onClick={() => setDeleting(c.name)}>Delete</button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ))}
      {creating && <CreateContext from={creating.from} contexts={list.data?.contexts ?? []}
        onClose={() => setCreating(null)} onDone={(c) => { setCreating(null); go(href('contexts', c.name)); }} />}
      {deleting && <Confirm title={`Delete ${deleting}?`} danger="Delete context"
        body={<p>Its services stop and are deleted; versions that only it reaches are garbage-collected soon after. Forks keep their own history.</p>}
        onNo={() => setDeleting(null)}
        onYes={async () => { const n = deleting; setDeleting(null); await act(() => sb.contexts.delete(n), `Deleted ${n}`); list.reload(); }} />}
    </section>
  );
}

/** Create a context from an image, or as a fork of another (at its head or a version). */
export function CreateContext({ from, version, contexts, onClose, onDone }: {
  from?: string; version?: string; contexts: Context[]; onClose: () => void; onDone: (c: { name: string }) => void;
}) {
  const [mode, setMode] = useState<'image' | 'fork'>(from ? 'fork' : 'image');
  const [name, setName] = useState(from ? `${from}-fork` : '');
  const [image, setImage] = useState('debian');
  const [source, setSource] = useState(from ?? contexts[0]?.name ?? '');
  const [ver, setVer] = useState(version ?? '');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const c = mode === 'image'
        ? await sb.contexts.create({ name, image: image || undefined })
        : await sb.context(source).fork(name, { version: ver || undefined });
      onDone(c);
    } catch (err) { setError(err); } finally { setBusy(false); }
  }

  return (
    <Dialog title={from ? `Fork ${from}` : 'New context'} onClose={onClose}>
      <form onSubmit={submit} class="form">
        {!from && (
          <fieldset class="row">
            <legend>Start from</legend>
            <label><input type="radio" name="mode" checked={mode === 'image'} onChange={() => setMode('image')} /> an image</label>
            <label><input type="radio" name="mode" checked={mode === 'fork'} onChange={() => setMode('fork')} disabled={contexts.length === 0} /> a fork of a context</label>
          </fieldset>
        )}
        <label for="ctx-name">Name</label>
        <input id="ctx-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required autofocus />
        {mode === 'image' ? (<>
          <label for="ctx-image">Image</label>
          <input id="ctx-image" value={image} onInput={(e) => setImage(e.currentTarget.value)} placeholder="debian" />
        </>) : (<>
          <label for="ctx-source">Source context</label>
          <select id="ctx-source" value={source} onChange={(e) => setSource(e.currentTarget.value)} disabled={!!from}>
            {(from ? [from] : contexts.map((c) => c.name)).map((n) => <option key={n} value={n}>{n}</option>)}
          </select>
          <label for="ctx-version">Version (empty: its head)</label>
          <input id="ctx-version" value={ver} onInput={(e) => setVer(e.currentTarget.value)} placeholder="v_…" />
        </>)}
        <ErrorBox error={error} />
        <div class="row end">
          <button type="button" onClick={onClose}>Cancel</button>
          <button type="submit" class="primary" disabled={busy}>{busy ? 'Creating…' : mode === 'image' ? 'Create' : 'Fork'}</button>
        </div>
      </form>
    </Dialog>
  );
}

import { useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { Confirm, Dialog } from '../components/dialog.js';
import { act, ErrorBox, notify } from '../components/errors.js';
import { ago, exact, shortId } from '../lib/format.js';
import { go, href } from '../lib/router.js';
import { useAsync } from '../lib/use-async.js';
import { useEvents } from '../lib/use-events.js';
import { CreateContext } from './contexts.js';
import { FilesView } from './files.js';
import { HistoryView } from './history.js';
import { MachinesView } from './machines.js';
import { RunView } from './run.js';
import { ServicesView } from './services.js';

const TABS: [string, string][] = [['history', 'History'], ['files', 'Files'], ['run', 'Run'], ['services', 'Services'], ['machines', 'Machines']];

/** One context: its head, and tabs for its history, files, queries, services and machines. */
export function ContextView({ name, tab, query }: { name: string; tab: string; query: URLSearchParams }) {
  const ctx = useAsync(() => sb.contexts.get(name), [name]);
  // Agents change contexts too: the head is looked up again when a commit to it is reported.
  useEvents({ context: name, kinds: ['version.committed'] }, `context:${name}`, ctx.reload);
  const [forking, setForking] = useState(false);
  const [merging, setMerging] = useState(false);
  const [deleting, setDeleting] = useState(false);
  const c = ctx.data;
  return (
    <section aria-labelledby="ctx-title">
      <nav class="crumbs" aria-label="Breadcrumb"><a href={href('contexts')}>Contexts</a> / <span>{name}</span></nav>
      <div class="bar">
        <h1 id="ctx-title">{name}</h1>
        {c && <span class="muted">image <b>{c.image}</b> · head <code title={c.head}>{shortId(c.head)}</code> · <span title={exact(c.updatedAt)}>active {ago(c.updatedAt)}</span></span>}
        <span class="spacer" />
        <button type="button" onClick={() => setForking(true)} disabled={!c}>Fork</button>
        <button type="button" onClick={() => setMerging(true)} disabled={!c}>Merge…</button>
        <button type="button" class="danger-ghost" onClick={() => setDeleting(true)} disabled={!c}>Delete</button>
      </div>
      <ErrorBox error={ctx.error} />
      <nav class="tabs" aria-label="Context sections">
        {TABS.map(([id, label]) => <a key={id} href={href('contexts', name, id)} aria-current={tab === id ? 'page' : undefined}>{label}</a>)}
      </nav>
      {c && tab === 'history' && <HistoryView ctx={c} onChanged={ctx.reload} />}
      {c && tab === 'files' && <FilesView ctx={c} version={query.get('version') ?? undefined} path={query.get('path') ?? '/'} onChanged={ctx.reload} />}
      {c && tab === 'run' && <RunView ctx={c} onChanged={ctx.reload} />}
      {c && tab === 'services' && <ServicesView ctx={c} />}
      {c && tab === 'machines' && <MachinesView context={c.name} embedded />}
      {forking && c && <CreateContext from={name} contexts={[c]} onClose={() => setForking(false)}
        onDone={(f) => { setForking(false); go(href('contexts', f.name, 'history')); }} />}
      {merging && <MergeDialog into={name} onClose={() => setMerging(false)} onDone={() => { setMerging(false); ctx.reload(); }} />}
      {deleting && <Confirm title={`Delete ${name}?`} danger="Delete context"
        body={<p>Its services stop and are deleted; versions only it reaches are garbage-collected soon after.</p>}
        onNo={() => setDeleting(false)}
        onYes={async () => {
          setDeleting(false);
          if (await act(async () => { await sb.contexts.delete(name); return true; }, `Deleted ${name}`)) go(href('contexts'));
        }} />}
    </section>
  );
}

function MergeDialog({ into, onClose, onDone }: { into: string; onClose: () => void; onDone: () => void }) {
  const all = useAsync(() => sb.contexts.list(), []);
  const [from, setFrom] = useState('');
  const [error, setError] = useState<unknown>(null);
  const choices = (all.data ?? []).filter((c) => c.name !== into);
  async function submit(e: Event) {
    e.preventDefault();
    setError(null);
    try {
      const r = await sb.context(into).merge(from || choices[0]!.name);
      notify('ok', `Merged: head ${shortId(r.version)}`);
      onDone();
    } catch (err) { setError(err); }
  }
  return (
    <Dialog title={`Merge into ${into}`} onClose={onClose}>
      <form onSubmit={submit} class="form">
        <label for="merge-from">Merge the changes of</label>
        <select id="merge-from" value={from} onChange={(e) => setFrom(e.currentTarget.value)}>
          {choices.map((c) => <option key={c.name} value={c.name}>{c.name}</option>)}
        </select>
        <p class="muted">A 3-way merge since the common ancestor; overlapping changes are a conflict and change nothing.</p>
        <ErrorBox error={error} />
        <div class="row end">
          <button type="button" onClick={onClose}>Cancel</button>
          <button type="submit" class="primary" disabled={choices.length === 0}>Merge</button>
        </div>
      </form>
    </Dialog>
  );
}

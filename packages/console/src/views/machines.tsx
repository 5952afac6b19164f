import { useRef, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { Confirm, Dialog } from '../components/dialog.js';
import { act, ErrorBox, notify } from '../components/errors.js';
import { ago, exact, seconds, shortId } from '../lib/format.js';
import { go, href } from '../lib/router.js';
import { useAsync } from '../lib/use-async.js';
import { useEvents } from '../lib/use-events.js';
import { MachineConsoleTail } from './machine-console.js';
import { MachineTerminal } from './machine-terminal.js';
import { MachineScreen } from './machine-screen.js';

const HIBERNATION = 'A machine hibernates by itself after its idle time without exec, file calls, requests or an open terminal, or when asked (Hibernate); any use restores it.';

/** Machines (all, or one context's), their snapshots, and one machine in detail. */
export function MachinesView({ id, context, embedded }: { id?: string; context?: string; embedded?: boolean }) {
  return id ? <MachineDetail id={id} /> : <MachineList context={context} embedded={embedded} />;
}

function MachineList({ context, embedded }: { context?: string; embedded?: boolean }) {
  const list = useAsync(() => sb.machines.list(), []);
  const snaps = useAsync(() => sb.machines.snapshots(), []);
  useEvents({ kinds: ['machine.state'] }, 'machines', list.reload);
  const [creating, setCreating] = useState(false);
  const machines = (list.data ?? []).filter((m) => !context || m.context === context);
  return (
    <section aria-labelledby="machines-title">
      <div class="bar">
        {embedded ? <h2 id="machines-title">Machines of {context}</h2> : <h1 id="machines-title">Machines</h1>}
        <span class="spacer" />
        <button type="button" class="primary" onClick={() => setCreating(true)}>New machine</button>
      </div>
      <p class="muted">{HIBERNATION}</p>
      <ErrorBox error={list.error} />
      {list.data && machines.length === 0 && <p class="muted">No machines{context ? ` made from ${context}` : ''}.</p>}
      {machines.length > 0 && (
        <div class="table-wrap">
          <table class="list">
            <thead><tr><th>Machine</th><th>State</th><th>From</th><th>Size</th><th>Ports</th><th>Created</th></tr></thead>
            <tbody>
              {machines.map((m) => (
                <tr key={m.id}>
                  <td><a href={href('machines', m.id)}><code>{m.id}</code></a></td>
                  <td><span class={`state state-${m.state}`}>{m.state}</span></td>
                  <td>{m.context ? <><a href={href('contexts', m.context)}>{m.context}</a>{m.version ? <code class="muted"> @{shortId(m.version)}</code> : ''}</> : m.image}</td>
                  <td>{m.memoryMb} MiB · {m.cpus} CPU</td>
                  <td>{m.ports.map((p) => <a key={p.port} href={p.url} target="_blank" rel="noopener noreferrer">{p.port}</a>)}</td>
                  <td title={exact(m.createdAt)}>{ago(m.createdAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {!embedded && <Snapshots list={snaps.data ?? []} error={snaps.error} reload={() => { snaps.reload(); list.reload(); }} />}
      {creating && <NewMachine context={context} onClose={() => setCreating(false)} onDone={(m) => { setCreating(false); go(href('machines', m.id)); }} />}
    </section>
  );
}

function Snapshots({ list, error, reload }: { list: { id: string; machine: string; memoryMb: number; cpus: number; createdAt: string }[]; error: unknown; reload: () => void }) {
  const [deleting, setDeleting] = useState<string | null>(null);
  return (
    <section aria-labelledby="snaps-title">
      <h2 id="snaps-title">Snapshots</h2>
      <ErrorBox error={error} />
      {list.length === 0 ? <p class="muted">No snapshots.</p> : (
        <div class="table-wrap">
          <table class="list">
            <thead><tr><th>Snapshot</th><th>Of machine</th><th>Size</th><th>Taken</th><th><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>{list.map((s) => (
              <tr key={s.id}>
                <td><code>{s.id}</code></td><td><a href={href('machines', s.machine)}><code>{s.machine}</code></a></td>
                <td>{s.memoryMb} MiB · {s.cpus} CPU</td><td title={exact(s.createdAt)}>{ago(s.createdAt)}</td>
                <td class="actions">
                  <button type="button" onClick={async () => { const r = await act(() => sb.machines.restore(s.id), (x) => `Restored as ${x.map((m) => m.id).join(', ')}`); if (r) reload(); }}>Restore</button>
                  <button type="button" class="danger-ghost" onClick={() => setDeleting(s.id)}>Delete</button>
                </td>
              </tr>))}
            </tbody>
          </table>
        </div>
      )}
      {deleting && <Confirm title="Delete this snapshot?" danger="Delete snapshot" body={<p><code>{deleting}</code>: its memory and disk files go.</p>}
        onNo={() => setDeleting(null)} onYes={async () => { const s = deleting; setDeleting(null); await act(() => sb.machines.deleteSnapshot(s), 'Snapshot deleted'); reload(); }} />}
    </section>
  );
}

function NewMachine({ context, onClose, onDone }: { context?: string; onClose: () => void; onDone: (m: { id: string }) => void }) {
  const [ctx, setCtx] = useState(context ?? '');
  const [version, setVersion] = useState('');
  const [image, setImage] = useState('debian');
  const [memory, setMemory] = useState('512');
  const [cpus, setCpus] = useState('1');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      onDone(await sb.machines.create({
        context: ctx || undefined, version: version || undefined, image: ctx ? undefined : image || undefined,
        memoryMb: Number(memory), cpus: Number(cpus),
      }));
    } catch (err) { setError(err); } finally { setBusy(false); }
  }
  return (
    <Dialog title="New machine" onClose={onClose}>
      <form class="form" onSubmit={submit}>
        <label for="m-ctx">Context (empty: a bare image)</label>
        <input id="m-ctx" value={ctx} onInput={(e) => setCtx(e.currentTarget.value)} />
        {ctx ? (<><label for="m-ver">Version (empty: its head)</label><input id="m-ver" value={version} onInput={(e) => setVersion(e.currentTarget.value)} /></>)
          : (<><label for="m-img">Image</label><input id="m-img" value={image} onInput={(e) => setImage(e.currentTarget.value)} /></>)}
        <div class="row">
          <label>Memory (MiB) <input type="number" class="short" value={memory} onInput={(e) => setMemory(e.currentTarget.value)} /></label>
          <label>CPUs <input type="number" class="short" value={cpus} onInput={(e) => setCpus(e.currentTarget.value)} /></label>
        </div>
        <p class="muted">The first machine of a version (and size) boots a template once: tens of seconds without KVM. Later ones restore in a moment.</p>
        <ErrorBox error={error} />
        <div class="row end">
          <button type="button" onClick={onClose}>Cancel</button>
          <button type="submit" class="primary" disabled={busy}>{busy ? 'Starting…' : 'Start'}</button>
        </div>
      </form>
    </Dialog>
  );
}

/** One machine: state, size, ports, lifecycle actions, its console log, and an interactive terminal. */
function MachineDetail({ id }: { id: string }) {
  const machine = sb.machines.get(id);
  const m = useAsync(() => machine.info(), [id]);
  const [committing, setCommitting] = useState(false);
  const [deleting, setDeleting] = useState(false);
  // No reloading once a delete is on its way: an answer after it would be a 404.
  const [removing, setRemoving] = useState(false);
  const removingRef = useRef(removing);
  removingRef.current = removing;
  useEvents({ machine: id, kinds: ['machine.state'] }, `machine:${id}`, () => { if (!removingRef.current) m.reload(); });
  const [port, setPort] = useState('');
  const x = m.data;
  const step = (s: 'pause' | 'resume' | 'hibernate' | 'stop') => act(() => machine[s](), (r) => `Machine ${r.state}`).then(m.reload);
  return (
    <section aria-labelledby="machine-title">
      <nav class="crumbs" aria-label="Breadcrumb"><a href={href('machines')}>Machines</a> / <code>{id}</code></nav>
      <div class="bar">
        <h1 id="machine-title">Machine <code>{shortId(id)}</code></h1>
        {x && <span class={`state state-${x.state}`}>{x.state}</span>}
      </div>
      <ErrorBox error={m.error} />
      {x && (<>
        <dl class="facts">
          <div><dt>From</dt><dd>{x.context ? <><a href={href('contexts', x.context)}>{x.context}</a> @<code>{shortId(x.version ?? '')}</code></> : x.image}</dd></div>
          <div><dt>Size</dt><dd>{x.memoryMb} MiB · {x.cpus} CPU</dd></div>
          <div><dt>Hibernates after</dt><dd>{seconds(x.idleTimeoutMs / 1000)} idle</dd></div>
          {x.snapshot && <div><dt>Restored from</dt><dd><code>{x.snapshot}</code></dd></div>}
          <div><dt>Created</dt><dd title={exact(x.createdAt)}>{ago(x.createdAt)}</dd></div>
          {x.mounts && <div><dt>Mounts</dt><dd>{x.mounts.map((m) => <span key={m.path} class="mount-tag" title={`${m.readOnly ? 'read-only' : 'writable'}, its copy at version ${m.version}`}>{m.context}:{m.path}{m.readOnly ? ' (read-only)' : ''}</span>)}</dd></div>}
          <div><dt>Ports</dt><dd>{x.ports.length === 0 ? 'none exposed' : x.ports.map((p) => <span key={p.port}><a href={p.url} target="_blank" rel="noopener noreferrer">{p.port}: {p.url}</a> </span>)}</dd></div>
        </dl>
        <div class="bar wrap">
          <button type="button" onClick={() => step('pause')} disabled={x.state !== 'running'}>Pause</button>
          <button type="button" onClick={() => step('resume')} disabled={x.state !== 'paused'}>Resume</button>
          <button type="button" onClick={() => step('hibernate')} disabled={x.state !== 'running' && x.state !== 'paused'}>Hibernate</button>
          <button type="button" onClick={() => step('stop')} disabled={x.state === 'stopped'}>Stop</button>
          <button type="button" onClick={() => act(() => machine.snapshot(), (r) => `Snapshot ${r}`)} disabled={x.state === 'stopped'}>Snapshot</button>
          <button type="button" onClick={async () => { const r = await act(() => machine.fork(), (f) => `Forked: ${f.map((k) => k.id).join(', ')}`); if (r?.[0]) go(href('machines', r[0].id)); }} disabled={x.state === 'stopped'}>Fork</button>
          <button type="button" onClick={() => setCommitting(true)} disabled={x.state === 'stopped'}>Commit…</button>
          <button type="button" class="danger-ghost" onClick={() => setDeleting(true)}>Delete</button>
          <form class="row" onSubmit={async (e) => { e.preventDefault(); const r = await act(() => machine.expose(Number(port)), (u) => `Port ${port}: ${u.url}`); if (r) { setPort(''); m.reload(); } }}>
            <label>Expose port <input type="number" class="short" value={port} onInput={(e) => setPort(e.currentTarget.value)} required /></label>
            <button type="submit">Expose</button>
          </form>
        </div>
        <p class="muted">{HIBERNATION}</p>
        {x.state === 'stopped' && <p class="tag warn">Stopped: only its disk is left, and it runs no commands.</p>}
        {x.state === 'paused' && <p class="tag warn">Paused: resume it to run commands.</p>}
        {x.state === 'hibernated' && <p class="tag">Hibernated: its memory is on disk; a command, a file call or the terminal wakes it.</p>}
        <MachineScreen id={id} state={x.state} image={x.image} />
        <MachineTerminal id={id} state={x.state} />
        <MachineConsoleTail id={id} />
      </>)}
      {committing && <CommitDialog id={id} context={x?.context} onClose={() => setCommitting(false)} />}
      {deleting && <Confirm title="Delete this machine?" danger="Delete machine" body={<p>Its disk, memory and run files go. Commit first to keep what it changed.</p>}
        onNo={() => setDeleting(false)}
        onYes={async () => {
          setDeleting(false);
          setRemoving(true);
          if (await act(async () => { await machine.remove(); return true; }, 'Machine deleted')) go(href('machines'));
          else setRemoving(false);
        }} />}
    </section>
  );
}

function CommitDialog({ id, context, onClose }: { id: string; context?: string; onClose: () => void }) {
  const [ctx, setCtx] = useState(context ?? '');
  const [error, setError] = useState<unknown>(null);
  return (
    <Dialog title="Commit the machine's changes" onClose={onClose}>
      <form class="form" onSubmit={async (e) => {
        e.preventDefault();
        try { const version = await sb.machines.get(id).commit(ctx); onClose(); notify('ok', `Committed to ${ctx}: ${shortId(version)}`); } catch (err) { setError(err); }
      }}>
        <label for="commit-ctx">Into context</label>
        <input id="commit-ctx" value={ctx} onInput={(e) => setCtx(e.currentTarget.value)} required />
        <p class="muted">What changed since the machine's template becomes one version (cause: machine), rebased over the context's head.</p>
        <ErrorBox error={error} />
        <div class="row end"><button type="button" onClick={onClose}>Cancel</button><button type="submit" class="primary">Commit</button></div>
      </form>
    </Dialog>
  );
}

import type { Context, Service } from '@shellbase/protocol';
import { useEffect, useRef, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { Confirm } from '../components/dialog.js';
import { act, ErrorBox } from '../components/errors.js';
import { ago, exact, seconds } from '../lib/format.js';
import { useAsync, useInterval } from '../lib/use-async.js';

/** A context's services: state, URLs, logs (polled while open), stop, delete, and a form to define one. */
export function ServicesView({ ctx }: { ctx: Context }) {
  const list = useAsync(() => sb.context(ctx.name).services.list(), [ctx.name]);
  useInterval(list.reload, 3000);
  const [logsOf, setLogsOf] = useState<string | null>(null);
  const [deleting, setDeleting] = useState<string | null>(null);
  const services = list.data ?? [];
  return (
    <section class="services" aria-label="Services">
      <NewService ctx={ctx.name} onDone={list.reload} />
      <ErrorBox error={list.error} />
      {list.data && services.length === 0 && <p class="muted">No services. A service runs a command over this context on a URL; it starts on the first request and sleeps when idle.</p>}
      {services.length > 0 && (
        <div class="table-wrap">
          <table class="list">
            <thead><tr><th>Name</th><th>State</th><th>Command</th><th>Port</th><th>URL</th><th>Idle after</th><th>Created</th><th><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>
              {services.map((s) => (
                <tr key={s.name} data-service={s.name}>
                  <td>{s.name}</td>
                  <td><span class={`state state-${s.state}`}>{s.state}</span></td>
                  <td><code>{typeof s.command === 'string' ? s.command : s.command.join(' ')}</code></td>
                  <td class="num">{s.port}</td>
                  <td class="urls">
                    <a href={s.url} target="_blank" rel="noopener noreferrer" class="service-url">{s.url}</a>
                    <a href={s.pathUrl} target="_blank" rel="noopener noreferrer" class="muted" title="the same service through a path (for clients that cannot resolve *.localhost)">path URL</a>
                  </td>
                  <td>{seconds(s.idleTimeoutMs / 1000)}</td>
                  <td title={exact(s.createdAt)}>{ago(s.createdAt)}</td>
                  <td class="actions">
                    <button type="button" aria-expanded={logsOf === s.name} onClick={() => setLogsOf(logsOf === s.name ? null : s.name)}>Logs</button>
                    <button type="button" disabled={s.state === 'sleeping'} onClick={() => act(() => sb.context(ctx.name).services.stop(s.name), `${s.name} is asleep`).then(list.reload)}>Stop</button>
                    <button type="button" class="danger-ghost" onClick={() => setDeleting(s.name)}>Delete</button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {logsOf && <Logs ctx={ctx.name} svc={logsOf} onClose={() => setLogsOf(null)} />}
      {deleting && <Confirm title={`Delete service ${deleting}?`} danger="Delete service"
        body={<p>It is stopped first (what it wrote commits as a version); its log goes with it.</p>}
        onNo={() => setDeleting(null)}
        onYes={async () => { const n = deleting; setDeleting(null); if (logsOf === n) setLogsOf(null); await act(() => sb.context(ctx.name).services.remove(n), `Deleted ${n}`); list.reload(); }} />}
    </section>
  );
}

/** The service's log (stdout and stderr across runs), fetched again every 2 s while shown. */
function Logs({ ctx, svc, onClose }: { ctx: string; svc: string; onClose: () => void }) {
  const [text, setText] = useState('');
  const [error, setError] = useState<unknown>(null);
  const pre = useRef<HTMLPreElement>(null);
  const poll = () => sb.context(ctx).services.logs(svc, { tail: 500 }).then((t) => { setText(t); setError(null); }, setError);
  useEffect(() => { void poll(); }, [ctx, svc]);
  useInterval(() => { void poll(); }, 2000);
  useEffect(() => {
    const el = pre.current;
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 80) el.scrollTop = el.scrollHeight;
  }, [text]);
  return (
    <section class="panel" aria-label={`Logs of ${svc}`}>
      <div class="bar"><h2>Logs of {svc}</h2><span class="muted">refreshing every 2 s</span><span class="spacer" />
        <button type="button" class="ghost" aria-label="Close the logs" onClick={onClose}>×</button></div>
      <ErrorBox error={error} />
      <pre ref={pre} class="logs" tabIndex={0}>{text || '(empty)'}</pre>
    </section>
  );
}

function NewService({ ctx, onDone }: { ctx: string; onDone: (s: Service) => void }) {
  const [open, setOpen] = useState(false);
  const [name, setName] = useState('web');
  const [command, setCommand] = useState('python3 -m http.server 8000');
  const [port, setPort] = useState('8000');
  const [idle, setIdle] = useState('300');
  const [error, setError] = useState<unknown>(null);
  if (!open) return <div class="bar"><button type="button" class="primary" onClick={() => setOpen(true)}>New service</button></div>;
  async function submit(e: Event) {
    e.preventDefault();
    setError(null);
    try {
      const s = await sb.context(ctx).services.create({ name, command, port: Number(port), idleTimeoutMs: Number(idle) * 1000 });
      setOpen(false);
      onDone(s);
    } catch (err) { setError(err); }
  }
  return (
    <form class="form panel inline-form" onSubmit={submit} aria-label="New service">
      <label>Name <input value={name} onInput={(e) => setName(e.currentTarget.value)} required /></label>
      <label class="grow">Command <input value={command} onInput={(e) => setCommand(e.currentTarget.value)} required spellcheck={false} /></label>
      <label>Port <input type="number" class="short" value={port} onInput={(e) => setPort(e.currentTarget.value)} required /></label>
      <label>Idle after (s) <input type="number" class="short" value={idle} onInput={(e) => setIdle(e.currentTarget.value)} /></label>
      <div class="row end">
        <button type="button" onClick={() => setOpen(false)}>Cancel</button>
        <button type="submit" class="primary">Create</button>
      </div>
      <ErrorBox error={error} />
    </form>
  );
}

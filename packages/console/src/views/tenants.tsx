import { useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { Confirm, Dialog } from '../components/dialog.js';
import { act, ErrorBox } from '../components/errors.js';
import { ago, exact } from '../lib/format.js';
import { href } from '../lib/router.js';
import { useAsync } from '../lib/use-async.js';

/** Admin only: tenants and their keys (create, rotate, revoke). A new key is shown once. */
export function TenantsView({ tenant }: { tenant?: string }) {
  const list = useAsync(() => sb.tenants.list(), []);
  const [creating, setCreating] = useState(false);
  const [shown, setShown] = useState<{ what: string; key: string } | null>(null);
  const [revoking, setRevoking] = useState<string | null>(null);
  return (
    <section aria-labelledby="tenants-title">
      <div class="bar">
        <h1 id="tenants-title">Tenants & keys</h1>
        <span class="spacer" />
        <button type="button" class="primary" onClick={() => setCreating(true)}>New tenant</button>
      </div>
      <ErrorBox error={list.error} />
      <div class="split">
        <div class="table-wrap">
          <table class="list">
            <thead><tr><th>Tenant</th><th>Quotas</th><th>Created</th><th><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>{(list.data ?? []).map((t) => (
              <tr key={t.id} class={tenant === t.name ? 'current' : ''}>
                <td><a href={href('tenants', t.name)}>{t.name}</a>{t.admin && <span class="tag">admin</span>}</td>
                <td class="muted">{t.quotas && Object.keys(t.quotas).length ? Object.entries(t.quotas).map(([k, v]) => `${k}=${v}`).join(', ') : 'server defaults'}</td>
                <td title={exact(t.createdAt)}>{ago(t.createdAt)}</td>
                <td class="actions">{!t.admin && <button type="button" class="danger-ghost" onClick={() => setRevoking(t.name)}>Revoke all keys</button>}</td>
              </tr>
            ))}</tbody>
          </table>
        </div>
        {tenant && <Keys tenant={tenant} admin={(list.data ?? []).some((t) => t.name === tenant && t.admin)} onNewKey={(key) => setShown({ what: `a new key of ${tenant}`, key })} />}
      </div>
      {creating && <NewTenant onClose={() => setCreating(false)} onDone={(name, key) => { setCreating(false); setShown({ what: `the key of ${name}`, key }); list.reload(); }} />}
      {shown && (
        <Dialog title="Copy the key now" onClose={() => setShown(null)}>
          <p>This is {shown.what}. It is shown only once: the server keeps a hash.</p>
          <input class="key" readOnly value={shown.key} aria-label="New API key" onFocus={(e) => e.currentTarget.select()} />
          <div class="row end">
            <button type="button" onClick={() => void navigator.clipboard?.writeText(shown.key)}>Copy</button>
            <button type="button" class="primary" onClick={() => setShown(null)}>Done</button>
          </div>
        </Dialog>
      )}
      {revoking && <Confirm title={`Revoke every key of ${revoking}?`} danger="Revoke all keys"
        body={<p>Every key of the tenant is refused from now on; its data stays.</p>}
        onNo={() => setRevoking(null)}
        onYes={async () => { const n = revoking; setRevoking(null); await act(() => sb.tenants.revoke(n), `Revoked the keys of ${n}`); list.reload(); }} />}
    </section>
  );
}

function Keys({ tenant, admin, onNewKey }: { tenant: string; admin: boolean; onNewKey: (key: string) => void }) {
  const keys = useAsync(() => sb.tenants.listKeys(tenant), [tenant]);
  const [revoking, setRevoking] = useState<string | null>(null);
  return (
    <section class="panel" aria-labelledby="keys-title">
      <div class="bar">
        <h2 id="keys-title">Keys of {tenant}</h2>
        <span class="spacer" />
        {!admin && <button type="button" onClick={async () => { const r = await act(() => sb.tenants.createKey(tenant)); if (r) { onNewKey(r.apiKey); keys.reload(); } }}>New key</button>}
      </div>
      {admin && <p class="muted">The admin key lives in $SHELLBASE_HOME/admin.key; it is not managed here.</p>}
      <ErrorBox error={keys.error} />
      <ul class="keys">{(keys.data ?? []).map((k) => (
        <li key={k.id}>
          <code>{k.id}</code> <span class="muted" title={exact(k.createdAt)}>created {ago(k.createdAt)}</span>
          {k.revokedAt ? <span class="tag">revoked {ago(k.revokedAt)}</span>
            : <button type="button" class="danger-ghost" onClick={() => setRevoking(k.id)}>Revoke</button>}
        </li>
      ))}</ul>
      {revoking && <Confirm title="Revoke this key?" danger="Revoke" body={<p><code>{revoking}</code> is refused from now on.</p>}
        onNo={() => setRevoking(null)}
        onYes={async () => { const id = revoking; setRevoking(null); await act(() => sb.tenants.revokeKey(tenant, id), 'Key revoked'); keys.reload(); }} />}
    </section>
  );
}

function NewTenant({ onClose, onDone }: { onClose: () => void; onDone: (name: string, key: string) => void }) {
  const [name, setName] = useState('');
  const [error, setError] = useState<unknown>(null);
  return (
    <Dialog title="New tenant" onClose={onClose}>
      <form class="form" onSubmit={async (e) => {
        e.preventDefault();
        try { const r = await sb.tenants.create(name); onDone(r.tenant.name, r.apiKey); } catch (err) { setError(err); }
      }}>
        <label for="tenant-name">Name</label>
        <input id="tenant-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required autofocus />
        <p class="muted">Quotas are the server's defaults; set others through the API.</p>
        <ErrorBox error={error} />
        <div class="row end"><button type="button" onClick={onClose}>Cancel</button><button type="submit" class="primary">Create</button></div>
      </form>
    </Dialog>
  );
}

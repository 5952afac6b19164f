import { useEffect, useState } from 'preact/hooks';
import { sb, session, setUnauthorizedHandler } from '../api/session.js';
import { href, useRoute } from '../lib/router.js';
import { ContextsView } from '../views/contexts.js';
import { ContextView } from '../views/context.js';
import { MachinesView } from '../views/machines.js';
import { TenantsView } from '../views/tenants.js';
import { UsageView } from '../views/usage.js';
import { Notices, notify } from './errors.js';
import { SignIn } from './sign-in.js';

const ADMIN = 'shellbase.admin';

/** The signed-in shell: navigation and the view the hash names. */
export function App() {
  const [key, setKey] = useState(session.key);
  const [admin, setAdmin] = useState(sessionStorage.getItem(ADMIN) === '1');
  const route = useRoute();

  useEffect(() => {
    setUnauthorizedHandler(() => {
      session.clear();
      sessionStorage.removeItem(ADMIN);
      setKey(null);
      notify('error', new Error('The API key was refused: sign in again.'));
    });
  }, []);
  // A reloaded tab re-checks whether its key is the admin's.
  useEffect(() => {
    if (!key) return;
    sb.tenants.list().then(() => setAdmin(true), () => setAdmin(false));
  }, [key]);

  if (!key) {
    return (<>
      <SignIn onSignedIn={(k, a) => {
        session.set(k);
        sessionStorage.setItem(ADMIN, a ? '1' : '0');
        setAdmin(a);
        setKey(k);
        if (!location.hash || location.hash === '#/') location.hash = '#/contexts';
      }} />
      <Notices />
    </>);
  }

  const [section = 'contexts', ...rest] = route.parts;
  const nav: [string, string][] = [['contexts', 'Contexts'], ['machines', 'Machines'], ['usage', 'Usage']];
  if (admin) nav.push(['tenants', 'Tenants & keys']);
  let view;
  if (section === 'contexts' && rest[0]) view = <ContextView name={rest[0]} tab={rest[1] ?? 'history'} query={route.query} />;
  else if (section === 'machines') view = <MachinesView id={rest[0]} context={route.query.get('context') ?? undefined} />;
  else if (section === 'usage') view = <UsageView admin={admin} />;
  else if (section === 'tenants' && admin) view = <TenantsView tenant={rest[0]} />;
  else view = <ContextsView />;

  return (
    <div class="shell">
      {/* Routes live in the hash, so the skip link moves focus itself instead of following "#main". */}
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById('main')?.focus(); }}>Skip to content</a>
      <header class="top">
        <a class="brand" href={href('contexts')}><span class="logo" aria-hidden="true">▚</span> shellbase</a>
        <nav aria-label="Sections">
          {nav.map(([id, label]) => (
            <a key={id} href={href(id)} aria-current={section === id ? 'page' : undefined}>{label}</a>
          ))}
        </nav>
        <span class="who">{admin ? 'admin key' : 'tenant key'}</span>
        <button type="button" class="ghost" onClick={() => { session.clear(); sessionStorage.removeItem(ADMIN); setKey(null); }}>Sign out</button>
      </header>
      <main id="main" tabIndex={-1}>{view}</main>
      <Notices />
    </div>
  );
}

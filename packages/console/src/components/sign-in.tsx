import { useState } from 'preact/hooks';
import { UnauthorizedError } from '@shellbase/sdk/core';
import { isAdminKey } from '../api/session.js';
import { ErrorBox } from './errors.js';

/** Asks for an API key and checks it against the API before keeping it for this tab. */
export function SignIn({ onSignedIn }: { onSignedIn: (key: string, admin: boolean) => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  async function submit(e: Event) {
    e.preventDefault();
    const k = key.trim();
    if (!k) { setError(new Error('Enter an API key.')); return; }
    setBusy(true);
    setError(null);
    try {
      onSignedIn(k, await isAdminKey(k));
    } catch (err) {
      if (err instanceof UnauthorizedError) {
        setError(new UnauthorizedError({
          code: err.code, message: 'That API key was not accepted.',
          hint: 'Check the key (the admin key is in $SHELLBASE_HOME/admin.key); a revoked key stops working.',
        }, err.status, { cause: err }));
      } else setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <main class="sign-in">
      <form onSubmit={submit} aria-labelledby="sign-in-title">
        <h1 id="sign-in-title"><span class="logo" aria-hidden="true">▚</span> shellbase console</h1>
        <label for="api-key">API key</label>
        <input id="api-key" name="api-key" type="password" autocomplete="off" spellcheck={false}
          value={key} onInput={(e) => setKey(e.currentTarget.value)} autofocus placeholder="sb_…" />
        <p class="muted">Kept in this tab only (session storage): closing the tab signs you out.</p>
        <ErrorBox error={error} />
        <button type="submit" class="primary" disabled={busy}>{busy ? 'Checking…' : 'Sign in'}</button>
      </form>
    </main>
  );
}

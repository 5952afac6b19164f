import { useEffect, useState } from 'preact/hooks';
import { ShellbaseError } from '@shellbase/sdk/core';

/** An error as the API gave it (the SDK's typed error): its message, its hint, its code. */
export function ErrorBox({ error, onClose }: { error: unknown; onClose?: () => void }) {
  if (!error) return null;
  const e = error instanceof ShellbaseError ? error : null;
  const message = e ? e.reason : error instanceof Error ? error.message : String(error);
  const paths = e?.details && Array.isArray(e.details.paths) ? (e.details.paths as unknown[]).map(String) : [];
  return (
    <div class="error" role="alert">
      <div class="error-text">
        <strong>{message}</strong>
        {e?.hint && <p class="hint">Hint: {e.hint}</p>}
        {paths.length > 0 && <p class="hint">Paths: {paths.slice(0, 20).join(', ')}{paths.length > 20 ? ' …' : ''}</p>}
        {e && e.status > 0 && <p class="code">{e.status} {e.code}</p>}
      </div>
      {onClose && <button type="button" class="ghost" aria-label="Dismiss" onClick={onClose}>×</button>}
    </div>
  );
}

export interface Notice { id: number; kind: 'ok' | 'error'; text?: string; error?: unknown }
type Listener = (n: Notice[]) => void;
let notices: Notice[] = [];
let next = 1;
const listeners = new Set<Listener>();
const emit = () => { for (const l of listeners) l(notices); };

/** A message in the corner: success fades, errors stay until dismissed. */
export function notify(kind: 'ok', text: string): void;
export function notify(kind: 'error', error: unknown): void;
export function notify(kind: 'ok' | 'error', what: unknown): void {
  const n: Notice = kind === 'ok' ? { id: next++, kind, text: String(what) } : { id: next++, kind, error: what };
  notices = [...notices.slice(-4), n];
  emit();
  if (kind === 'ok') setTimeout(() => dismiss(n.id), 4000);
}

export function dismiss(id: number): void {
  notices = notices.filter((n) => n.id !== id);
  emit();
}

/** Runs an action and reports its outcome as a notice; returns its result, or undefined after an error. */
export async function act<T>(f: () => Promise<T>, done?: string | ((r: T) => string)): Promise<T | undefined> {
  try {
    const r = await f();
    if (done) notify('ok', typeof done === 'string' ? done : done(r));
    return r;
  } catch (err) {
    notify('error', err);
    return undefined;
  }
}

export function Notices() {
  const [list, setList] = useState<Notice[]>(notices);
  useEffect(() => { listeners.add(setList); return () => { listeners.delete(setList); }; }, []);
  return (
    <div class="notices" aria-live="polite">
      {list.map((n) => n.kind === 'ok'
        ? <div key={n.id} class="notice ok" role="status">{n.text}</div>
        : <div key={n.id} class="notice"><ErrorBox error={n.error} onClose={() => dismiss(n.id)} /></div>)}
    </div>
  );
}

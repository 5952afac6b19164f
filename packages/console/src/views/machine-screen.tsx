import type { MachineState } from '@shellbase/protocol';
import { useEffect, useRef, useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { ErrorBox } from '../components/errors.js';

/** How often the shown screen is captured again. */
const REFRESH_MS = 1000;

/** Browser key names that are X key names of another spelling. */
const X_KEYS: Record<string, string> = {
  Enter: 'Return', Backspace: 'BackSpace', Escape: 'Escape', Tab: 'Tab', Delete: 'Delete', Insert: 'Insert',
  ArrowLeft: 'Left', ArrowRight: 'Right', ArrowUp: 'Up', ArrowDown: 'Down', Home: 'Home', End: 'End',
  PageUp: 'Page_Up', PageDown: 'Page_Down', ' ': 'space',
};

/** A key press as an input: a plain character is typed, anything else (or with Ctrl/Alt) is an X key chord. */
export function keyInput(e: Pick<KeyboardEvent, 'key' | 'ctrlKey' | 'altKey' | 'shiftKey' | 'metaKey'>): { type: 'type'; text: string } | { type: 'key'; key: string } | null {
  const named = X_KEYS[e.key] ?? (/^F([1-9]|1[0-2])$/.test(e.key) ? e.key : null);
  const chord = e.ctrlKey || e.altKey || e.metaKey;
  if (!named && e.key.length !== 1) return null; // Shift, Control and the like alone
  if (!chord && !named) return { type: 'type', text: e.key };
  const base = named ?? (/^[A-Za-z0-9]$/.test(e.key) ? e.key.toLowerCase() : null);
  if (!base) return null;
  const mods = [e.ctrlKey && 'ctrl', e.altKey && 'alt', e.metaKey && 'super', e.shiftKey && 'shift'].filter(Boolean);
  return { type: 'key', key: [...mods, base].join('+') };
}

/**
 * A machine's screen (`GET /v1/machines/{id}/screen`, a machine of the desktop image), captured
 * again every second while shown; clicks, the wheel and keys on it go to the machine
 * (`POST /v1/machines/{id}/input`) at the screen's own coordinates.
 */
export function MachineScreen({ id, state, image }: { id: string; state: MachineState; image: string }) {
  const [shown, setShown] = useState(image === 'desktop');
  const [src, setSrc] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const img = useRef<HTMLImageElement | null>(null);
  const running = state === 'running';

  useEffect(() => {
    if (!shown || !running) return;
    let stop = false;
    let url: string | null = null;
    const capture = async () => {
      while (!stop) {
        const started = Date.now();
        // A hidden tab captures nothing (each capture is a use of the machine, which keeps it from hibernating).
        if (document.hidden) { await new Promise((r) => setTimeout(r, REFRESH_MS)); continue; }
        try {
          const png = await sb.machines.get(id).screen();
          if (stop) break;
          const next = URL.createObjectURL(new Blob([png as BlobPart], { type: 'image/png' }));
          setSrc(next);
          if (url) URL.revokeObjectURL(url);
          url = next;
          setError(null);
        } catch (e) { setError(e); await new Promise((r) => setTimeout(r, 5 * REFRESH_MS)); }
        await new Promise((r) => setTimeout(r, Math.max(0, REFRESH_MS - (Date.now() - started))));
      }
    };
    void capture();
    return () => { stop = true; setSrc(null); if (url) URL.revokeObjectURL(url); };
  }, [id, shown, running]);

  // Inputs go one after another, in the order they happened (keys typed fast would otherwise race).
  // Characters typed while inputs wait join the waiting text input they follow: one request for a word.
  const queue = useRef<Promise<unknown>>(Promise.resolve());
  const typing = useRef<{ type: 'type'; text: string } | null>(null);
  const send = (input: Parameters<ReturnType<typeof sb.machines.get>['input']>[0]) => {
    if (input.type === 'type' && typing.current) { typing.current.text += input.text; return; }
    const next = input.type === 'type' ? { type: 'type' as const, text: input.text } : input;
    typing.current = next.type === 'type' ? next : null;
    queue.current = queue.current.then(() => {
      if (typing.current === next) typing.current = null; // sent from here on: later characters wait in one of their own
      return sb.machines.get(id).input(next);
    }).catch(setError);
  };
  // Wheel steps while a scroll is on its way are added up into the next one (a trackpad sends dozens a second).
  const wheel = useRef({ busy: false, up: 0, down: 0, left: 0, right: 0, at: { x: 0, y: 0 } });
  const scroll = (direction: 'up' | 'down' | 'left' | 'right', point: { x: number; y: number }) => {
    const w = wheel.current;
    w[direction] = Math.min(w[direction] + 1, 20);
    w.at = point;
    if (w.busy) return;
    const next = (['down', 'up', 'right', 'left'] as const).find((d) => w[d] > 0);
    if (!next) return;
    const amount = w[next];
    w[next] = 0;
    w.busy = true;
    queue.current = queue.current.then(() => sb.machines.get(id).input({ type: 'scroll', ...w.at, direction: next, amount })).catch(setError)
      .finally(() => { w.busy = false; const more = (['down', 'up', 'right', 'left'] as const).find((d) => w[d] > 0); if (more) { w[more]--; scroll(more, w.at); } });
  };
  /** Where on the machine's screen an event on the image is. */
  const at = (e: MouseEvent) => {
    const el = img.current!;
    const r = el.getBoundingClientRect();
    const x = Math.round(((e.clientX - r.left) / r.width) * el.naturalWidth);
    const y = Math.round(((e.clientY - r.top) / r.height) * el.naturalHeight);
    return { x: Math.max(0, Math.min(el.naturalWidth - 1, x)), y: Math.max(0, Math.min(el.naturalHeight - 1, y)) };
  };

  return (
    <section aria-labelledby="screen-title">
      <div class="bar">
        <h2 id="screen-title">Screen</h2>
        <span class="spacer" />
        <button type="button" onClick={() => setShown(!shown)}>{shown ? 'Hide' : 'Show'}</button>
      </div>
      {shown && !running && <p class="muted">The screen is shown while the machine runs.</p>}
      {shown && running && <ErrorBox error={error} />}
      {shown && running && src && (
        <div class="machine-screen" tabIndex={0} aria-label="The machine's screen: clicks, the wheel and keys go to the machine"
          onKeyDown={(e) => { const input = keyInput(e); if (input) { e.preventDefault(); send(input); } }}>
          <img ref={img} src={src} alt="The machine's screen" draggable={false}
            onClick={(e) => send({ type: 'click', ...at(e), button: 'left' })}
            onContextMenu={(e) => { e.preventDefault(); send({ type: 'click', ...at(e), button: 'right' }); }}
            onWheel={(e) => {
              e.preventDefault();
              const sideways = Math.abs(e.deltaX) > Math.abs(e.deltaY);
              if (e.deltaX === 0 && e.deltaY === 0) return;
              scroll(sideways ? (e.deltaX > 0 ? 'right' : 'left') : (e.deltaY > 0 ? 'down' : 'up'), at(e));
            }} />
        </div>
      )}
    </section>
  );
}

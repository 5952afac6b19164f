import { useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { ErrorBox } from '../components/errors.js';
import { useAsync, useInterval } from '../lib/use-async.js';

/** Escape sequences and other control characters a serial console carries, dropped for a plain view. */
const CONTROL = /\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]/g;

/** The end of a machine's serial console log (`GET /v1/machines/{id}/console`), refreshed while shown. */
export function MachineConsoleTail({ id }: { id: string }) {
  const [tail, setTail] = useState(200);
  const log = useAsync(() => sb.machines.get(id).console({ tail }), [id, tail]);
  useInterval(log.reload, 5000);
  const lines = log.data?.lines ?? [];
  return (
    <section aria-labelledby="console-title">
      <div class="bar">
        <h2 id="console-title">Console log</h2>
        <label>Last <select value={String(tail)} onChange={(e) => setTail(Number(e.currentTarget.value))}>
          {[50, 200, 1000].map((n) => <option key={n} value={n}>{n}</option>)}
        </select> lines</label>
        <span class="spacer" />
        <button type="button" onClick={log.reload}>Refresh</button>
      </div>
      <ErrorBox error={log.error} />
      {log.data && (lines.length === 0
        ? <p class="muted">Nothing on its serial console yet (a restored machine prints only what happens after its restore).</p>
        : <>
          {log.data.truncated && <p class="muted">Earlier lines are left out ({log.data.size.toLocaleString()} bytes in all).</p>}
          <pre class="console-log" tabIndex={0} aria-label="Serial console, last lines">{lines.map((l) => l.replace(CONTROL, '')).join('\n')}</pre>
        </>)}
    </section>
  );
}

import type { ErrorBody, MachineState, PtyMessage } from '@shellbase/protocol';
import { useEffect, useRef, useState } from 'preact/hooks';
import { machinePty, sb } from '../api/session.js';
import { Terminal, type TermHandle } from '../components/terminal.js';

type Status = 'idle' | 'connecting' | 'open' | 'closed';
const encoder = new TextEncoder();

/**
 * An interactive terminal on a machine: root's login shell on a PTY, over the API's WebSocket
 * (`GET /v1/machines/{id}/pty`): keys go as binary frames, the terminal's size as resize messages,
 * and the shell's output comes back as it is (colours, full-screen programs). Opened on request:
 * an open terminal wakes a hibernated machine and keeps it from hibernating.
 */
export function MachineTerminal({ id, state }: { id: string; state: MachineState }) {
  const [status, setStatus] = useState<Status>('idle');
  const [shown, setShown] = useState(false);
  const ws = useRef<WebSocket | null>(null);
  const term = useRef<TermHandle | null>(null);
  const size = useRef({ cols: 80, rows: 24 });
  const usable = state === 'running' || state === 'hibernated';

  useEffect(() => () => ws.current?.close(), []);

  function connect(t: TermHandle) {
    ws.current?.close();
    setStatus('connecting');
    t.write('\x1b[2mconnecting…\x1b[0m\r\n');
    const s = machinePty(id, size.current.cols, size.current.rows);
    ws.current = s;
    let opened = false;
    s.onopen = () => { opened = true; setStatus('open'); t.focus(); };
    s.onmessage = (e: MessageEvent<ArrayBuffer | string>) => {
      if (typeof e.data !== 'string') { t.write(new Uint8Array(e.data)); return; }
      const msg = JSON.parse(e.data) as PtyMessage | { type: 'error'; error: ErrorBody };
      if (msg.type === 'exit') t.write(`\r\n\x1b[2m[the shell ended${msg.exitCode !== null ? `: exit ${msg.exitCode}` : msg.signal ? `: ${msg.signal}` : ''}]\x1b[0m\r\n`);
      else if (msg.type === 'error') t.write(`\r\n\x1b[31m${msg.error.message}${msg.error.hint ? ` (hint: ${msg.error.hint})` : ''}\x1b[0m\r\n`);
    };
    s.onclose = () => {
      if (ws.current !== s) return;
      ws.current = null;
      setStatus('closed');
      // A refused handshake shows the page nothing of the API's answer: the machine's state says why.
      if (!opened) {
        void sb.machines.get(id).info().then(
          (m) => t.write(`\x1b[31mthe terminal could not be opened: the machine is ${m.state}${m.state === 'paused' ? ' (resume it first)' : ''}\x1b[0m\r\n`),
          (err: Error) => t.write(`\x1b[31mthe terminal could not be opened: ${err.message}\x1b[0m\r\n`),
        );
      } else {
        t.write('\x1b[2m[disconnected]\x1b[0m\r\n');
      }
    };
  }

  const onData = (d: string) => { if (ws.current?.readyState === WebSocket.OPEN) ws.current.send(encoder.encode(d)); };
  const onResize = (cols: number, rows: number) => {
    size.current = { cols, rows };
    if (ws.current?.readyState === WebSocket.OPEN) ws.current.send(JSON.stringify({ type: 'resize', cols, rows } satisfies PtyMessage));
  };

  return (
    <section class="machine-terminal" aria-labelledby="term-title">
      <div class="bar">
        <h2 id="term-title">Terminal</h2>
        <span class="muted" data-terminal-status={status}>{status === 'open' ? 'connected' : status === 'connecting' ? 'connecting…' : status === 'closed' ? 'disconnected' : ''}</span>
        <span class="spacer" />
        {status === 'open' || status === 'connecting'
          ? <button type="button" onClick={() => ws.current?.close()}>Close terminal</button>
          : <button type="button" disabled={!usable} onClick={() => { if (!shown) setShown(true); else if (term.current) connect(term.current); }}>{shown ? 'Reconnect' : 'Open terminal'}</button>}
      </div>
      <p class="muted">Root's login shell on a terminal in the machine (a PTY): interactive programs work. While it is open the machine does not hibernate; opening it wakes a hibernated one.</p>
      {shown && (
        <Terminal label={`Terminal of machine ${id}`} rows={20} raw onData={onData} onResize={onResize}
          onReady={(t, s) => { term.current = t; size.current = s; connect(t); }} />
      )}
    </section>
  );
}

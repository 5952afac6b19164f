import type { MachineExecEvent } from '@shellbase/protocol';
import { useRef } from 'preact/hooks';
import { ApiError, ndjson } from '../api/client.js';
import { Api } from '../api/endpoints.js';
import { Terminal, type TermHandle } from '../components/terminal.js';

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * A line-mode terminal on a machine: each line typed is one exec (the API has no PTY yet), its
 * output streamed back; `cd` is remembered here and sent as the next exec's cwd.
 */
export function MachineTerminal({ id }: { id: string }) {
  const st = useRef({ line: '', cwd: '/root', history: [] as string[], at: 0, running: null as AbortController | null });
  const prompt = (t: TermHandle) => t.write(`\x1b[32mroot@${id.slice(0, 10)}\x1b[0m:\x1b[34m${st.current.cwd}\x1b[0m# `);

  async function exec(t: TermHandle, line: string) {
    const s = st.current;
    const cd = /^\s*cd(?:\s+(.*))?$/.exec(line);
    const command = cd ? `cd ${quote(s.cwd)} && cd ${cd[1]?.trim() ? cd[1].trim() : '~'} && pwd` : line;
    const abort = new AbortController();
    s.running = abort;
    let out = '';
    try {
      const res = await Api.machineExecStream(id, { command, cwd: cd ? undefined : s.cwd, timeoutMs: 120_000 }, abort.signal);
      for await (const ev of ndjson<MachineExecEvent>(res)) {
        if (ev.type === 'stdout') { if (cd) out += ev.data; else t.write(ev.data); }
        else if (ev.type === 'stderr') t.write(ev.data.includes('\x1b[') ? ev.data : `\x1b[31m${ev.data}\x1b[0m`);
        else if (ev.type === 'exit') {
          if (cd && ev.exitCode === 0 && out.trim()) s.cwd = out.trim();
          if (ev.exitCode !== 0) t.write(`\x1b[2m[exit ${ev.exitCode}${ev.timedOut ? ', timed out' : ''}]\x1b[0m\n`);
        } else if (ev.type === 'error') t.write(`\x1b[31m${ev.error.message}\x1b[0m\n`);
      }
    } catch (err) {
      if (abort.signal.aborted) t.write('^C\n');
      else if (err instanceof ApiError) t.write(`\x1b[31m${err.message}${err.hint ? ` (hint: ${err.hint})` : ''}\x1b[0m\n`);
      else t.write(`\x1b[31m${String(err)}\x1b[0m\n`);
    } finally {
      s.running = null;
      prompt(t);
    }
  }

  function onData(data: string, t: TermHandle) {
    const s = st.current;
    if (data === '\x03') { if (s.running) s.running.abort(); else { s.line = ''; t.write('^C\n'); prompt(t); } return; }
    if (s.running) return;
    if (data === '\x1b[A' || data === '\x1b[B') {
      if (s.history.length === 0) return;
      s.at = Math.max(0, Math.min(s.history.length, s.at + (data === '\x1b[A' ? -1 : 1)));
      t.write('\b \b'.repeat(s.line.length));
      s.line = s.history[s.at] ?? '';
      t.write(s.line);
      return;
    }
    if (data.startsWith('\x1b')) return; // other keys' escape sequences: no line editing beyond backspace
    for (const ch of data) {
      if (ch === '\r' || ch === '\n') {
        t.write('\n');
        const line = s.line;
        s.line = '';
        if (line.trim()) {
          s.history.push(line);
          s.at = s.history.length;
          void exec(t, line);
          return;
        }
        prompt(t);
      } else if (ch === '\x7f' || ch === '\b') {
        if (s.line.length) { s.line = s.line.slice(0, -1); t.write('\b \b'); }
      } else if (ch >= ' ' && ch !== '\x7f') {
        s.line += ch;
        t.write(ch);
      }
    }
  }

  return (
    <div class="machine-terminal">
      <p class="muted">Line mode: each line runs as its own exec on the machine (no PTY in the API yet, so no interactive programs); the console remembers <code>cd</code>. Ctrl+C stops a running line.</p>
      <Terminal label={`Terminal of machine ${id}`} rows={16} onData={onData}
        onReady={(t) => { t.write('\x1b[2mshellbase machine terminal (line mode)\x1b[0m\n'); prompt(t); t.focus(); }} />
    </div>
  );
}

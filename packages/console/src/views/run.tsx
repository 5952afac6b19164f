import type { CommitMode, Context, ExecExit } from '@shellbase/protocol';
import { useState } from 'preact/hooks';
import { sb } from '../api/session.js';
import { ErrorBox } from '../components/errors.js';
import { TermBuffer, Terminal } from '../components/terminal.js';
import { bytes, shortId } from '../lib/format.js';
import { href } from '../lib/router.js';

const BOLD = (s: string) => `\x1b[1m${s}\x1b[0m`;
/** stderr in red, unless the command colours it itself. */
const stderr = (s: string) => (s.includes('\x1b[') ? s : `\x1b[31m${s}\x1b[0m`);

/** A command box: runs a query over the context, streams its output into a terminal, then tells what it committed. */
export function RunView({ ctx, onChanged }: { ctx: Context; onChanged: () => void }) {
  const [term] = useState(() => new TermBuffer());
  const [command, setCommand] = useState('');
  const [commit, setCommit] = useState<CommitMode>('always');
  const [timeout, setTimeoutS] = useState('60');
  const [running, setRunning] = useState<AbortController | null>(null);
  const [exit, setExit] = useState<ExecExit | null>(null);
  const [error, setError] = useState<unknown>(null);

  async function run(e?: Event) {
    e?.preventDefault();
    const cmd = command.trim();
    if (!cmd || running) return;
    const abort = new AbortController();
    setRunning(abort);
    setExit(null);
    setError(null);
    term.write(`${BOLD(`$ ${cmd}`)}\n`);
    try {
      // An error event ends the stream as the SDK's typed error (caught below).
      const events = sb.context(ctx.name).execStream(cmd, { commit, timeoutMs: Number(timeout) * 1000 || undefined, signal: abort.signal });
      for await (const ev of events) {
        if (ev.type === 'stdout') term.write(ev.data);
        else if (ev.type === 'stderr') term.write(stderr(ev.data));
        else if (ev.type === 'exit') {
          const { type: _t, ...x } = ev;
          setExit(x);
          term.write(`\x1b[2m[exit ${x.exitCode}${x.signal ? ` ${x.signal}` : ''}${x.timedOut ? ', timed out' : ''} · ${x.committed ? `committed ${shortId(x.version)}` : 'not committed'}]\x1b[0m\n`);
        }
      }
    } catch (err) {
      if (abort.signal.aborted) term.write('\x1b[33m[stopped: the query was killed]\x1b[0m\n');
      else setError(err);
    } finally {
      setRunning(null);
      onChanged();
    }
  }

  return (
    <section class="run" aria-label="Run a command">
      <form class="command" onSubmit={run}>
        <label for="command" class="sr-only">Command</label>
        <textarea id="command" rows={2} spellcheck={false} placeholder="A shell command, e.g. ls -la /root (Enter runs it, Shift+Enter starts a new line)"
          value={command} onInput={(e) => setCommand(e.currentTarget.value)}
          onKeyDown={(e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); void run(); } }} />
        <div class="row">
          <label>Commit <select value={commit} onChange={(e) => setCommit(e.currentTarget.value as CommitMode)}>
            <option value="always">always</option><option value="on-success">on success</option><option value="never">never</option>
          </select></label>
          <label>Timeout (s) <input type="number" min="1" max="600" value={timeout} onInput={(e) => setTimeoutS(e.currentTarget.value)} class="short" /></label>
          <span class="spacer" />
          <button type="button" onClick={() => term.clear()}>Clear</button>
          {running
            ? <button type="button" class="danger" onClick={() => running.abort()}>Stop</button>
            : <button type="submit" class="primary" disabled={!command.trim()}>Run</button>}
        </div>
      </form>
      <Terminal label="Query output" onReady={(t) => term.attach(t)} />
      <ErrorBox error={error} />
      {exit && <Outcome x={exit} ctx={ctx.name} />}
    </section>
  );
}

/** What the query left: its exit, the version and whether its writes became the head. */
function Outcome({ x, ctx }: { x: ExecExit; ctx: string }) {
  return (
    <dl class="outcome" aria-label="Outcome" data-testid="outcome">
      <div><dt>Exit code</dt><dd class={x.exitCode === 0 ? 'ok' : 'bad'}>{x.exitCode}{x.signal ? ` (${x.signal})` : ''}</dd></div>
      {x.timedOut && <div><dt>Timed out</dt><dd class="bad">yes</dd></div>}
      {x.oomKilled && <div><dt>Out of memory</dt><dd class="bad">killed</dd></div>}
      <div><dt>Commit</dt><dd class={x.committed ? 'ok' : 'muted'}>{x.committed ? 'committed' : x.conflict ? 'conflict: nothing committed' : 'nothing committed'}</dd></div>
      <div><dt>Version</dt><dd><a href={href('contexts', ctx, 'history')}><code>{shortId(x.version)}</code></a>{x.baseVersion !== x.version ? <span class="muted"> (from {shortId(x.baseVersion)})</span> : ''}</dd></div>
      {x.conflict && <div><dt>Conflicting paths</dt><dd>{x.conflict.paths.join(', ')} — kept in <code>{shortId(x.conflict.version)}</code></dd></div>}
      <div><dt>Time</dt><dd>{x.usage.wallMs} ms wall · {x.usage.cpuMs} ms CPU</dd></div>
      <div><dt>Written</dt><dd>{bytes(x.usage.bytesWritten)}</dd></div>
      {x.diskLimitHit && <div><dt>Disk limit</dt><dd class="bad">hit</dd></div>}
      {x.truncated && <div><dt>Output</dt><dd class="bad">truncated</dd></div>}
      {x.retries ? <div><dt>Retries</dt><dd>{x.retries}</dd></div> : null}
    </dl>
  );
}

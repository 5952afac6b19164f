import { request } from 'node:http';
import type { CodeError, CodeEvent, CodeExecution, CodeResult, RunCodeRequest } from '@shellbase/protocol';
import { ShellbaseError, invalid } from '../errors.js';
import type { PortTarget } from '../util/pipe.js';

/** The guest port a machine's code interpreter listens on (the `code-interpreter` image's; E2B's). */
export const CODE_PORT = 49999;
/** A cell's time limit when the request names none. */
const DEFAULT_TIMEOUT_MS = 60_000;
/** Output kept for a JSON answer (a stream keeps none): past it, output is dropped and the answer says so. */
const KEPT_OUTPUT_CHARS = 16 << 20;
/** The longest line of the interpreter's stream (a result with a large image fits). */
const MAX_LINE_CHARS = 256 << 20;

/** The result fields the interpreter's `result` lines carry, as E2B's protocol names them. */
const RESULT_FIELDS = ['text', 'html', 'markdown', 'svg', 'png', 'jpeg', 'pdf', 'latex', 'json', 'javascript', 'data', 'chart', 'extra'] as const;

/**
 * Runs a cell in the code interpreter a machine serves on CODE_PORT (`POST /execute`, E2B's
 * protocol: newline-delimited JSON) and turns its lines into shellbase's (`CodeEvent`, camelCase,
 * `exception` for the code's own error so that `error` stays the API's). A cell past its time
 * limit, or one whose caller went away, has its connection closed, which makes the interpreter
 * interrupt the kernel (its state stays); the first comes back as a `TimeoutError` exception.
 */
export async function runCode(target: PortTarget, req: RunCodeRequest, hooks: { signal?: AbortSignal; onEvent?: (e: CodeEvent) => void } = {}): Promise<CodeExecution> {
  if (req.context !== undefined && req.language !== undefined) throw invalid('give a context or a language, not both', 'a context has its own language');
  const body = JSON.stringify({
    code: req.code, ...(req.context !== undefined ? { context_id: req.context } : {}), ...(req.language !== undefined ? { language: req.language } : {}),
    ...(req.envs ? { env_vars: req.envs } : {}),
  });
  const timeoutMs = req.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const out: CodeExecution = { results: [], stdout: [], stderr: [] };
  // Streamed, each event goes to the caller as it comes and only the count and error are kept.
  const keep = hooks.onEvent === undefined;
  let kept = 0;
  let cut = false;
  const emit = (e: CodeEvent) => {
    if (e.type === 'count') out.executionCount = e.executionCount;
    else if (e.type === 'exception') out.error = e.error;
    else if (keep && (e.type === 'stdout' || e.type === 'stderr')) {
      if (kept + e.data.length <= KEPT_OUTPUT_CHARS) { out[e.type].push(e.data); kept += e.data.length; } else if (!cut) {
        cut = true;
        out.stderr.push(`[output cut at ${KEPT_OUTPUT_CHARS} characters: read it as a stream (Accept: application/x-ndjson)]\n`);
      }
    } else if (keep && e.type === 'result') out.results.push(e.result);
    hooks.onEvent?.(e);
  };
  const { socketPath, release } = await target.acquire();
  try {
    await new Promise<void>((resolveOnce, rejectOnce) => {
      let timedOut = false;
      let settled = false;
      const resolve = () => { if (!settled) { settled = true; clearTimeout(timer); resolveOnce(); } };
      const reject = (err: unknown) => { if (!settled) { settled = true; clearTimeout(timer); rejectOnce(err); } };
      const expired = () => {
        if (settled) return;
        emit({ type: 'exception', error: { name: 'TimeoutError', value: `the cell ran past its time limit (${timeoutMs} ms) and was interrupted`, traceback: '' } });
        resolve();
      };
      const r = request({ socketPath, agent: false, method: 'POST', path: '/execute', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        if (res.statusCode !== 200) {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => { if (text.length < 4096) text += c; });
          res.on('end', () => reject(refusal(res.statusCode ?? 0, text.trim())));
          res.on('error', reject);
          return;
        }
        // A line's start waits in `pending` (pieces, joined once its end comes): a long line is not copied per chunk.
        const pending: string[] = [];
        let pendingChars = 0;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          let from = 0;
          for (let nl = chunk.indexOf('\n'); nl >= 0; from = nl + 1, nl = chunk.indexOf('\n', from)) {
            pending.push(chunk.slice(from, nl));
            pendingChars = 0;
            const line = pending.join('').trim();
            pending.length = 0;
            const e = line ? translate(line) : null;
            if (e) emit(e);
          }
          if (from < chunk.length) {
            pending.push(chunk.slice(from));
            pendingChars += chunk.length - from;
            if (pendingChars > MAX_LINE_CHARS) reject(new ShellbaseError('unavailable', `the code interpreter sent a line longer than ${MAX_LINE_CHARS} characters`));
            if (settled) r.destroy();
          }
        });
        res.on('end', resolve);
        res.on('error', (err) => { if (timedOut) expired(); else reject(err); });
        res.on('close', () => {
          if (timedOut) expired();
          else if (!res.complete) reject(new ShellbaseError('unavailable', 'the machine\'s code interpreter went away mid-cell (the machine stopped, or its interpreter restarted)'));
        });
      });
      const timer = setTimeout(() => { timedOut = true; r.destroy(); }, timeoutMs);
      const abort = () => { const e = new ShellbaseError('unavailable', 'the caller went away'); reject(e); r.destroy(e); };
      if (hooks.signal?.aborted) abort();
      hooks.signal?.addEventListener('abort', abort, { once: true });
      r.on('close', () => hooks.signal?.removeEventListener('abort', abort));
      r.on('error', (err) => {
        if (timedOut) { expired(); return; }
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ECONNREFUSED' || code === 'ENOENT') {
          reject(new ShellbaseError('failed_precondition', `nothing serves code on the machine's port ${CODE_PORT}`, { hint: 'make the machine from the code-interpreter image' }));
        } else if (code === 'ECONNRESET' || code === 'EPIPE' || err.message === 'socket hang up') {
          reject(new ShellbaseError('unavailable', `the machine's code interpreter closed the connection mid-cell: ${err.message}`, { hint: 'retry; the machine may have stopped or its interpreter restarted' }));
        } else reject(err);
      });
      r.end(body);
    });
  } finally {
    release();
  }
  return out;
}

/** The interpreter's refusal of a request as the API's error. */
function refusal(status: number, text: string): ShellbaseError {
  const why = text || `status ${status}`;
  if (status === 404) return new ShellbaseError('not_found', `the code interpreter: ${why}`, { hint: 'list the interpreter\'s contexts, or name a language' });
  if (status === 400 || status === 422 || status === 413) return invalid(`the code interpreter refused the cell: ${why}`);
  return new ShellbaseError('unavailable', `the code interpreter answered ${status}: ${why}`);
}

/** One line of the interpreter's stream as shellbase's event (null for keep-alives and unknown lines). */
function translate(line: string): CodeEvent | null {
  let m: Record<string, unknown>;
  try { m = JSON.parse(line) as Record<string, unknown>; } catch { return null; }
  switch (m.type) {
    case 'number_of_executions': return typeof m.execution_count === 'number' ? { type: 'count', executionCount: m.execution_count } : null;
    case 'stdout': case 'stderr': return { type: m.type, data: typeof m.text === 'string' ? m.text : '' };
    case 'result': {
      const result: CodeResult = { isMainResult: m.is_main_result === true };
      for (const f of RESULT_FIELDS) if (m[f] !== undefined && m[f] !== null) (result as Record<string, unknown>)[f] = m[f];
      return { type: 'result', result };
    }
    case 'error': {
      const error: CodeError = { name: String(m.name ?? 'Error'), value: String(m.value ?? ''), traceback: typeof m.traceback === 'string' ? m.traceback : '' };
      return { type: 'exception', error };
    }
    default: return null;
  }
}

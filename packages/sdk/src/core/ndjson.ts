import { HTTP_STATUS, type ErrorBody, type ErrorCode } from '@shellbase/protocol';
import { errorFromBody } from './errors.js';

/**
 * The events of an NDJSON response, one per line (blank lines are keep-alives); an `error` event
 * is thrown as the typed error. Read with the stream's reader, which every browser has; a reader
 * that stops early cancels the response.
 */
export async function* ndjson<E extends { type: string }>(res: Response): AsyncGenerator<E> {
  if (!res.body) return;
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  let ended = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) { ended = true; return; }
      buffered += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (!line) continue;
        const event = JSON.parse(line) as E & { error?: ErrorBody };
        if (event.type === 'error' && event.error) throw errorFromBody(event.error, HTTP_STATUS[event.error.code as ErrorCode] ?? 500);
        yield event;
      }
    }
  } finally {
    if (!ended) await reader.cancel();
  }
}

/**
 * Longer than this, an exec is read as a stream and put together here: a plain response's head
 * comes only when the command ends, and fetch gives up waiting for a head after 300 s. Not with
 * `onConflict: "retry"`, whose stream carries every run's output where a result has the last's.
 */
export const LONG_EXEC_MS = 240_000;

/** A whole result from an exec's events: the output joined, the `exit` event's fields. */
export async function collectExec<R>(events: AsyncIterable<{ type: string; data?: string }>): Promise<R> {
  const out: string[] = [];
  const err: string[] = [];
  for await (const e of events) {
    if (e.type === 'stdout') out.push(e.data ?? '');
    else if (e.type === 'stderr') err.push(e.data ?? '');
    else if (e.type === 'exit') {
      const { type: _t, ...exit } = e;
      return { ...exit, stdout: out.join(''), stderr: err.join('') } as R;
    }
  }
  throw new Error('the exec stream ended without its exit event');
}

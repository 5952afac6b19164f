import type { FastifyReply } from 'fastify';
import { toShellbaseError } from './errors.js';

export const NDJSON = 'application/x-ndjson';

/** Events of an NDJSON response that starts with its first event (errors before it are plain JSON errors). */
export class NdjsonStream {
  started = false;

  constructor(private readonly reply: FastifyReply) {}

  send(event: { type: string } & Record<string, unknown>): void {
    if (!this.started) {
      this.started = true;
      this.reply.hijack();
      this.reply.raw.writeHead(200, { 'content-type': NDJSON, 'cache-control': 'no-store' });
    }
    if (!this.reply.raw.destroyed) this.reply.raw.write(`${JSON.stringify(event)}\n`);
  }

  end(): void {
    if (this.started) this.reply.raw.end();
  }
}

/**
 * Answers a long operation that reports as it goes (a pull, an import, a
 * build): with `Accept: application/x-ndjson` each report is a line and the
 * result is the last (`final` gives its `type`); otherwise the result as JSON
 * once it is done. A client that goes away aborts the operation.
 */
export async function respondEvents<R extends Record<string, unknown>>(
  accept: string | undefined, reply: FastifyReply, final: string,
  run: (report: (event: { type: string } & Record<string, unknown>) => void, signal: AbortSignal) => Promise<R>,
): Promise<R | FastifyReply> {
  const abort = new AbortController();
  reply.raw.on('close', () => { if (!reply.raw.writableFinished) abort.abort(); });
  if (!(accept ?? '').includes(NDJSON)) return run(() => undefined, abort.signal);
  const out = new NdjsonStream(reply);
  try {
    const result = await run((e) => out.send(e), abort.signal);
    out.send({ type: final, ...result });
  } catch (err) {
    if (!out.started) throw err;
    out.send({ type: 'error', error: toShellbaseError(err).toBody() });
  }
  out.end();
  return reply;
}

import type { FastifyReply } from 'fastify';
import { toShellbaseError } from './errors.js';

export const NDJSON = 'application/x-ndjson';

/** A signal aborted when the request's client goes away before its answer is written. */
export function abortOnClose(reply: FastifyReply): AbortSignal {
  const abort = new AbortController();
  reply.raw.on('close', () => { if (!reply.raw.writableFinished) abort.abort(); });
  return abort.signal;
}

/** Events of an NDJSON response that starts with its first event or keep-alive (errors before it are plain JSON errors). */
export class NdjsonStream {
  started = false;
  private lastWrite = Date.now();
  private readonly timer: NodeJS.Timeout;

  /**
   * A line of its own every `KEEPALIVE_MS` of silence (an empty line, which readers skip): an
   * HTTP client gives up on a response whose head or body is silent for minutes (fetch: 300 s),
   * and a command may print nothing for longer. Before the first event the head goes out with
   * the first keep-alive, so an error after that is an `error` event, not a status.
   */
  constructor(private readonly reply: FastifyReply) {
    this.timer = setInterval(() => {
      if (Date.now() - this.lastWrite < KEEPALIVE_MS) return;
      this.start();
      this.write('\n');
    }, KEEPALIVE_MS / 2);
    this.timer.unref();
    reply.raw.once('close', () => clearInterval(this.timer));
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    this.reply.hijack();
    this.reply.raw.writeHead(200, { 'content-type': NDJSON, 'cache-control': 'no-store' });
  }

  private write(text: string): void {
    this.lastWrite = Date.now();
    if (!this.reply.raw.destroyed) this.reply.raw.write(text);
  }

  send(event: { type: string } & Record<string, unknown>): void {
    this.start();
    this.write(`${JSON.stringify(event)}\n`);
  }

  end(): void {
    clearInterval(this.timer);
    if (this.started) this.reply.raw.end();
  }
}

/** Silence after which an NDJSON answer writes an empty line (tests may shorten it: SHELLBASE_NDJSON_KEEPALIVE_MS). */
const KEEPALIVE_MS = Number(process.env.SHELLBASE_NDJSON_KEEPALIVE_MS ?? 30_000);

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
  const signal = abortOnClose(reply);
  if (!(accept ?? '').includes(NDJSON)) return run(() => undefined, signal);
  const out = new NdjsonStream(reply);
  try {
    const result = await run((e) => out.send(e), signal);
    out.send({ type: final, ...result });
  } catch (err) {
    if (!out.started) { out.end(); throw err; }
    out.send({ type: 'error', error: toShellbaseError(err).toBody() });
  }
  out.end();
  return reply;
}

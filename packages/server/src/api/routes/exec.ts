import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Static } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { toShellbaseError } from '../errors.js';
import { NDJSON, NdjsonStream, abortOnClose } from '../ndjson.js';
import { ExecRequestSchema as ExecBody, ExecResultSchema as ExecResult, NameParamsSchema as NameParams } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

/**
 * POST /v1/contexts/:name/exec. With `Accept: application/x-ndjson` the
 * output streams as it happens; the response starts with the first event (or
 * the first keep-alive, after 30 s of silence: api/ndjson.ts), so errors found
 * before then are still plain JSON errors, and later ones `error` events.
 * A client that goes away kills its query.
 */
export function execRoutes(app: FastifyInstance, ops: Operations): void {
  app.post<{ Params: Static<typeof NameParams>; Body: Static<typeof ExecBody> }>('/v1/contexts/:name/exec', {
    config: { op: 'context.exec' }, schema: {
      tags: ['queries'], params: NameParams, body: ExecBody,
      response: { 200: ExecResult, ...errorResponses },
    },
  }, async (req, reply) => respondExec(req.headers.accept, reply, (hooks) => ops.run(req.caller, 'context.exec', { context: req.params.name, req: req.body, hooks })));
}

type Hooks = { signal: AbortSignal; onOutput?: (type: 'stdout' | 'stderr', data: string) => void };

/**
 * Answers an exec (a query's or a machine's): the result as JSON, or with
 * `Accept: application/x-ndjson` its output as it happens and an `exit` event.
 * A client that goes away aborts the command.
 */
export async function respondExec<R extends { stdout: string; stderr: string }>(
  accept: string | undefined, reply: FastifyReply, run: (hooks: Hooks) => Promise<R>,
): Promise<R | FastifyReply> {
  const signal = abortOnClose(reply);
  if (!(accept ?? '').includes(NDJSON)) return run({ signal });
  const out = new NdjsonStream(reply);
  try {
    const { stdout: _o, stderr: _e, ...exit } = await run({ signal, onOutput: (type, data) => out.send({ type, data }) });
    out.send({ type: 'exit', ...exit });
  } catch (err) {
    if (!out.started) { out.end(); throw err; }
    out.send({ type: 'error', error: toShellbaseError(err).toBody() });
  }
  out.end();
  return reply;
}


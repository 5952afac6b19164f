import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ShellbaseError } from '../errors.js';

/** Turns anything thrown by a route into the one wire form of an error. */
export function toShellbaseError(err: unknown): ShellbaseError {
  if (err instanceof ShellbaseError) return err;
  const fe = err as FastifyError & { validation?: { instancePath?: string; message?: string; params?: Record<string, unknown> }[] };
  if (fe?.validation) {
    const first = fe.validation[0];
    const field = `${fe.validationContext ?? 'body'}${first?.instancePath ?? ''}`.replace(/\//g, '.');
    const extra = first?.params?.additionalProperty;
    const message = extra ? `unknown field ${JSON.stringify(extra)} in ${field}` : `${field} ${first?.message ?? 'is invalid'}`;
    return new ShellbaseError('invalid_argument', message, {
      details: { field, ...(extra ? { unknownField: extra } : {}) },
      hint: extra ? 'remove the field: see GET /v1/openapi.json for the request schema' : 'see GET /v1/openapi.json for the request schema',
    });
  }
  if (fe?.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return new ShellbaseError('payload_too_large', 'request body too large', { hint: 'send at most 10 MiB' });
  }
  if (typeof fe?.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new ShellbaseError('invalid_argument', fe.message, { hint: 'send a JSON body with Content-Type: application/json' });
  }
  return new ShellbaseError('internal', 'internal error', { cause: err });
}

export function errorHandler(err: unknown, req: FastifyRequest, reply: FastifyReply): void {
  const e = toShellbaseError(err);
  if (e.code === 'internal') req.log.error({ err }, 'internal error');
  void reply.status(e.status).send({ error: e.toBody() });
}

import type { Duplex } from 'node:stream';
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
    // A schema's maximum (such as a time limit's ceiling) is named as a resolved limit's is.
    const max = first?.params?.comparison === '<=' && typeof first.params.limit === 'number' ? first.params.limit : undefined;
    return new ShellbaseError('invalid_argument', message, {
      details: { field, ...(extra ? { unknownField: extra } : {}), ...(max !== undefined ? { max } : {}) },
      hint: extra ? 'remove the field: see GET /v1/openapi.json for the request schema' : 'see GET /v1/openapi.json for the request schema',
    });
  }
  if (fe?.code === 'FST_ERR_BAD_URL') {
    // Fastify's message echoes the URL; the caller knows what it sent.
    return new ShellbaseError('invalid_argument', 'the URL is not valid (a bad percent-encoding?)', { hint: 'percent-encode path segments as UTF-8' });
  }
  if (fe?.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return new ShellbaseError('payload_too_large', 'request body too large', { hint: 'send at most 10 MiB' });
  }
  if (typeof fe?.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new ShellbaseError('invalid_argument', fe.message, { hint: 'send a JSON body with Content-Type: application/json' });
  }
  return new ShellbaseError('internal', 'internal error', { cause: err });
}

/**
 * Requests the HTTP parser rejects (malformed, or headers too large) never reach a route: they
 * get the same error form, written straight to the socket, which then closes.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (!socket.writable) { socket.destroy(); return; }
  const tooLarge = err.code === 'HPE_HEADER_OVERFLOW';
  const timeout = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
  const e = new ShellbaseError(tooLarge ? 'payload_too_large' : 'invalid_argument',
    tooLarge ? 'request headers too large' : timeout ? 'the request took too long to arrive' : 'malformed HTTP request', {
      hint: tooLarge ? 'send at most 16 KiB of request line and headers' : 'send HTTP/1.1 with a Content-Length or chunked body',
    });
  const body = JSON.stringify({ error: e.toBody() });
  const status = tooLarge ? '431 Request Header Fields Too Large' : timeout ? '408 Request Timeout' : '400 Bad Request';
  socket.end(`HTTP/1.1 ${status}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

export function errorHandler(err: unknown, req: FastifyRequest, reply: FastifyReply): void {
  const e = toShellbaseError(err);
  if (e.code === 'internal') req.log.error({ err }, 'internal error');
  void reply.status(e.status).send({ error: e.toBody() });
}

import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Peers } from '../core/peers.js';
import { ShellbaseError } from '../errors.js';
import { placeOf, type Operations } from '../ops/dispatch.js';
import type { OperationKind } from '../ops/operations.js';
import { forwardRequest } from './forward.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The operation a route's requests are (ops/operations.ts): where they run comes from it. */
    op?: OperationKind;
  }
}

/**
 * Cluster mode: a request whose operation another worker must serve (a query on a context whose
 * preferred worker is another, a call about a machine or service another worker runs:
 * `placeOf`) is passed there as it came — method, path, body, the caller's API key, which that
 * worker checks again — with a proof under the cluster secret, and its answer comes back as it
 * goes (streamed output included). Runs after the hook that authenticates the caller, before the
 * body is read (it is streamed on). A request passed here (its proof checked: `req.forwarded`)
 * is served here, never passed again.
 */
export function routeRequests(app: FastifyInstance, ops: Operations, peers: Peers): void {
  app.addHook('onRequest', async (req, reply) => {
    const kind = req.routeOptions.config.op;
    if (!kind || req.forwarded || !req.caller) return;
    const { name, id, svc } = req.params as { name?: string; id?: string; svc?: string };
    const place = placeOf(kind, { ...(name !== undefined ? { context: name } : {}), ...(id !== undefined ? { id } : {}), ...(svc !== undefined ? { service: svc } : {}) });
    if (!place) return;
    const to = await ops.where(place, req.caller, false);
    if (to === null) return;
    reply.hijack();
    forwardRequest(to, req.raw, reply.raw, (err) => {
      // A client gone first broke the forward itself: that says nothing of the other worker.
      if (!reply.raw.destroyed) ops.router.unreachable(to);
      failForward(reply, err, 'context' in place ? 'retry: this worker runs the query itself next time' : 'retry shortly');
    }, peers);
  });
}

function failForward(reply: FastifyReply, err: unknown, hint: string): void {
  const res = reply.raw;
  if (res.headersSent) { res.destroy(); return; }
  const e = err instanceof ShellbaseError ? err : new ShellbaseError('unavailable', String(err), {});
  const body = JSON.stringify({ error: { ...e.toBody(), hint } });
  res.writeHead(e.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

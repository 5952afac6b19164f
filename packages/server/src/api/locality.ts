import type { FastifyInstance } from 'fastify';
import type { Peers } from '../core/peers.js';
import { ShellbaseError } from '../errors.js';
import { forwardRequest } from './forward.js';

/** Where a context's queries should run: another worker's API URL, or null for here. */
export interface Locality {
  route(tenantId: string, context: string): string | null;
  /** The worker at `address` did not answer: placement leaves it out for now. */
  unreachable(address: string): void;
}

const EXEC = '/v1/contexts/:name/exec';

/**
 * Cluster mode with locality on (SHELLBASE_LOCALITY): a query that lands on a worker other than
 * its context's preferred one is passed there as it came (cluster/locality.ts chooses; the
 * receiving worker checks the proof it carries and the key again, and runs it), so each
 * context's layers stay warm in one worker's cache. A request another worker passed on (its
 * proof checked: `req.forwarded`) is served here, never passed again. Runs after the hook that
 * authenticates the caller, before the body is read (it is streamed on).
 */
export function routeQueries(app: FastifyInstance, locality: Locality, peers: Peers): void {
  app.addHook('onRequest', async (req, reply) => {
    if (req.method !== 'POST' || req.routeOptions.url !== EXEC || req.forwarded || !req.caller) return;
    const to = locality.route(req.caller.tenantId, (req.params as { name: string }).name);
    if (to === null) return;
    reply.hijack();
    forwardRequest(to, req.raw, reply.raw, (err) => {
      locality.unreachable(to);
      const res = reply.raw;
      if (res.headersSent) { res.destroy(); return; }
      const e = err instanceof ShellbaseError ? err : new ShellbaseError('unavailable', String(err), {});
      const body = JSON.stringify({ error: { ...e.toBody(), hint: 'retry: this worker runs the query itself next time' } });
      res.writeHead(e.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    }, peers);
  });
}

import type { FastifyInstance } from 'fastify';
import type { Peers } from '../core/peers.js';
import type { Machines } from '../machines/machines.js';
import { ShellbaseError } from '../errors.js';
import { forwardRequest } from './forward.js';

/** A call about one machine: `/v1/machines/ID` and everything under it. */
const MACHINE_CALL = /^\/v1\/machines\/(m_[a-z0-9]{1,64})(?:[/?]|$)/;

/**
 * Cluster mode: a call about a machine another live worker runs is passed to that worker's API as
 * it came (method, path, body, the caller's API key, which that worker checks again), and its
 * answer comes back as it goes (streamed exec output included), with a proof under the cluster
 * secret. Runs after the caller's key (and any proof) is checked here; a call that was passed here
 * already is served here.
 */
export function forwardMachineCalls(app: FastifyInstance, machines: Machines, peers: Peers): void {
  app.addHook('onRequest', async (req, reply) => {
    if (req.forwarded) return;
    const m = MACHINE_CALL.exec(req.url);
    if (!m) return;
    const to = await machines.ownerApi(m[1]);
    if (!to) return;
    reply.hijack();
    forwardRequest(to, req.raw, reply.raw, (err) => {
      const e = err instanceof ShellbaseError ? err : new ShellbaseError('internal', 'internal error', { cause: err });
      if (reply.raw.headersSent) reply.raw.destroy();
      else reply.raw.writeHead(e.status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify({ error: e.toBody() }));
    }, peers);
  });
}

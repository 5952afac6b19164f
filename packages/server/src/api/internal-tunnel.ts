import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { Peers } from '../core/peers.js';
import { notFound, ShellbaseError } from '../errors.js';
import type { PortTarget } from '../util/pipe.js';
import { forwardedHere } from './forward.js';
import { joinTunnel, reject, TUNNEL_PROTOCOL } from './tunnel.js';

const INTERNAL = /^\/internal\/services\/([a-z2-7]{26})\/connect$/;

/**
 * `GET /internal/services/{token}/connect` with `Upgrade: shellbase-tcp`: a raw TCP tunnel to a
 * service that runs on this worker, for another worker whose sandbox connects to it (its own
 * context's service on 127.0.0.1, or a link `SERVICE.CONTEXT.internal`). The caller is a worker,
 * not a tenant: the request carries a proof (core/peers.ts) and no API key, since the worker that
 * passes it made the socket only for sandboxes allowed to reach the service. Without a valid
 * proof (or outside a cluster) it is refused. Returns false for other paths (not this handler's).
 */
export function internalTunnels(peers: Peers | undefined, byToken: (token: string) => Promise<PortTarget | null>, log: Logger): (req: IncomingMessage, socket: Duplex, head: Buffer) => boolean {
  return (req, socket, head) => {
    const m = INTERNAL.exec(req.url ?? '');
    if (!m) return false;
    socket.on('error', () => socket.destroy());
    void (async () => {
      if (!forwardedHere(req, peers)) throw new ShellbaseError('unauthorized', 'this path is for the workers of a cluster', { hint: 'reach a service through its gateway URL or /v1/contexts/{name}/services/{svc}/connect' });
      if ((req.headers.upgrade ?? '').toLowerCase() !== TUNNEL_PROTOCOL) throw new ShellbaseError('invalid_argument', `upgrade to ${TUNNEL_PROTOCOL}`);
      const target = await byToken(m[1]);
      if (!target) throw notFound('service', 'this token');
      await joinTunnel(target, socket, head);
    })().catch((err: unknown) => {
      if (!(err instanceof ShellbaseError)) log.error({ err }, 'internal tunnel failed');
      reject(socket, err instanceof ShellbaseError ? err : new ShellbaseError('internal', 'internal error'));
    });
    return true;
  };
}

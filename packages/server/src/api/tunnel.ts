import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { Caller } from '../core/deps.js';
import type { Operations } from '../ops/dispatch.js';
import type { Peers } from '../core/peers.js';
import { forwardedHere, forwardUpgrade } from './forward.js';
import { ShellbaseError, notFound } from '../errors.js';
import { connectTarget, type PortTarget } from '../util/pipe.js';

/** The protocol name a client asks for in `Upgrade:` (anything else is not a tunnel). */
export const TUNNEL_PROTOCOL = 'shellbase-tcp';

/** What a tunnel path names, found for the calling tenant (a 404 for anything else). */
export type TunnelTarget = (caller: Caller, path: string) => Promise<PortTarget>;

const SERVICE = /^\/v1\/contexts\/([^/]+)\/services\/([^/]+)\/connect$/;

/** `/v1/contexts/{name}/services/{svc}/connect`: the names, decoded; null for other paths. */
export function tunnelPath(path: string): { context: string; service: string } | null {
  const m = SERVICE.exec(path.split('?')[0]);
  return m ? { context: decodeURIComponent(m[1]), service: decodeURIComponent(m[2]) } : null;
}

/**
 * Plain TCP to a service from outside: `GET /v1/contexts/{name}/services/{svc}/connect`
 * with `Connection: Upgrade`, `Upgrade: shellbase-tcp` and the API key. The
 * service is woken (as by a gateway request) and, once its port accepts, the
 * answer is `101 Switching Protocols` and the connection carries the service's
 * bytes both ways, holding it awake until either side closes. Errors before
 * that are the API's JSON errors with their statuses.
 */
export function tunnelUpgrades(ops: Pick<Operations, 'begin' | 'where'>, find: TunnelTarget, log: Logger, peers?: Peers): (req: IncomingMessage, socket: Duplex, head: Buffer) => void {
  return (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    if ((req.headers.upgrade ?? '').toLowerCase() !== TUNNEL_PROTOCOL) {
      reject(socket, new ShellbaseError('invalid_argument', `the API upgrades only to ${TUNNEL_PROTOCOL}`, { hint: 'WebSockets to services go through the gateway URL' }));
      return;
    }
    void (async () => {
      const passed = forwardedHere(req, peers);
      const caller = await ops.begin(req.headers.authorization);
      try {
        const target = await find(caller, req.url ?? '/');
        // In a cluster, a service another worker runs is reached through that worker's API.
        const there = await ops.where({ port: target, door: 'api' }, caller, passed);
        if (there) {
          forwardUpgrade(there, req, socket, head, peers!);
          return;
        }
        await joinTunnel(target, socket, head);
      } finally {
        caller.hold.release();
      }
    })().catch((err: unknown) => {
      if (!(err instanceof ShellbaseError)) log.error({ err }, 'tunnel failed');
      reject(socket, err instanceof ShellbaseError ? err : new ShellbaseError('internal', 'internal error'));
    });
  };
}

/**
 * Wakes `target` here and, once its port accepts, answers `101 Switching Protocols` and joins the
 * socket to it both ways, holding it awake until either side closes.
 */
export async function joinTunnel(target: PortTarget, socket: Duplex, head: Buffer): Promise<void> {
  const { up, release } = await connectTarget(() => target.acquire()).catch((e: unknown) => {
    throw new ShellbaseError('unavailable', `${target.name} did not accept the connection: ${(e as Error).message}`, { hint: 'see its logs' });
  });
  const done = () => { release(); socket.destroy(); up.destroy(); };
  // A client gone while the connect was tried again has already closed: nothing would end this.
  if (socket.destroyed) { done(); return; }
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${TUNNEL_PROTOCOL}\r\nConnection: Upgrade\r\n\r\n`);
  if (head.length) up.write(head);
  up.once('close', done);
  socket.once('close', done);
  up.on('error', done);
  socket.pipe(up).pipe(socket);
}

/** Answers an upgrade that will not happen with the API's JSON error. */
export function reject(socket: Duplex, e: ShellbaseError): void {
  const body = JSON.stringify({ error: e.toBody() });
  // Destroyed once written: the socket is paused, so it would never read the client's end.
  socket.once('finish', () => socket.destroy());
  socket.end(`HTTP/1.1 ${e.status} ${e.code}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

/** The tunnel targets of contexts' services. */
export function serviceTunnels(target: (caller: Caller, context: string, service: string) => Promise<PortTarget>): TunnelTarget {
  return async (caller, path) => {
    const p = tunnelPath(path);
    if (!p) throw notFound('tunnel', path.split('?')[0]);
    return target(caller, p.context, p.service);
  };
}

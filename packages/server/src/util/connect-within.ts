import type { Socket } from 'node:net';
import { TLSSocket } from 'node:tls';

/** How long a connection to another worker may take: across a partition it would wait for TCP to give up (minutes). */
export const CONNECT_TIMEOUT_MS = 5_000;

/**
 * Destroys `socket` with an error unless it connects within `ms` (a TLS socket: unless its
 * handshake is done by then); nothing when it is connected already.
 */
export function connectWithin(socket: Socket, ms = CONNECT_TIMEOUT_MS): void {
  if (!socket.connecting) return;
  const timer = setTimeout(() => socket.destroy(new Error(`no connection within ${ms} ms`)), ms);
  socket.once(socket instanceof TLSSocket ? 'secureConnect' : 'connect', () => clearTimeout(timer));
  socket.once('close', () => clearTimeout(timer));
}

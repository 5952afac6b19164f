import type { Duplex } from 'node:stream';
import { ShellbaseError } from '../errors.js';

/** Headers of one hop only: never passed on by the gateway or a forward to another worker. */
export const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer'];

/** An upgrade that cannot be passed through: the error, and the socket closes. */
export function failUpgrade(socket: Duplex, err: unknown): void {
  const e = toError(err);
  // Destroyed once written: the socket is paused, so it would never read the client's end.
  socket.once('finish', () => socket.destroy());
  socket.end(`HTTP/1.1 ${e.status} ${e.code}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${JSON.stringify({ error: e.toBody() })}`);
}

/** An error as the wire shows it (anything not typed is an internal error). */
export function toError(err: unknown): ShellbaseError {
  return err instanceof ShellbaseError ? err : new ShellbaseError('internal', 'internal error', { cause: err });
}

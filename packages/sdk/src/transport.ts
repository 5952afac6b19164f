import type { Socket } from 'node:net';
import type { Transport } from './core/transport.js';

/** Node's client: requests, and raw connections after an HTTP upgrade. */
export interface NodeTransport extends Transport {
  /** A raw connection after an HTTP upgrade at `path` (TCP tunnels to services). */
  tunnel(path: string): Promise<Socket>;
}

/** Each client's key, for the SDK's own modules that open connections themselves (pty.ts); not part of the class's surface. */
const KEYS = new WeakMap<Transport, string | undefined>();
export const apiKeyOf = (t: Transport): string | undefined => KEYS.get(t);
export const keepApiKey = (t: Transport, key: string | undefined): void => { KEYS.set(t, key); };

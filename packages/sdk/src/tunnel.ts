import { createServer, type AddressInfo, type Socket } from 'node:net';
import { upgradeRequest } from './upgrade.js';

/** The Upgrade protocol of the API's TCP tunnels. */
const PROTOCOL = 'shellbase-tcp';

/**
 * One TCP connection to a service through the API (`GET …/connect` upgraded to
 * `shellbase-tcp`, with the API key): resolves to the socket once the service
 * is awake and its port accepted, or rejects with the API's typed error.
 */
export async function openTunnel(baseUrl: string, path: string, apiKey: string | undefined): Promise<Socket> {
  const { socket, head } = await upgradeRequest(baseUrl, path, apiKey, { upgrade: PROTOCOL });
  if (head.length) socket.unshift(head);
  return socket;
}

/** A local port whose every connection is tunnelled to a service. */
export interface LocalTunnel {
  host: string;
  port: number;
  /** Stops listening and cuts the open connections. */
  close(): Promise<void>;
}

/**
 * Listens on `host:port` (port 0: any free one) and joins each connection
 * to a fresh tunnel; a tunnel that cannot open closes its connection and
 * reports through `onError`.
 */
export async function listenTunnel(open: () => Promise<Socket>, options: { host?: string; port?: number; onError?: (e: unknown) => void } = {}): Promise<LocalTunnel> {
  const open_ = new Set<Socket>();
  const server = createServer((local) => {
    open_.add(local);
    local.once('close', () => open_.delete(local));
    local.on('error', () => local.destroy());
    local.pause();
    open().then((remote) => {
      open_.add(remote);
      remote.once('close', () => { open_.delete(remote); local.destroy(); });
      remote.on('error', () => remote.destroy());
      local.once('close', () => remote.destroy());
      local.pipe(remote).pipe(local);
      local.resume();
    }, (e: unknown) => { options.onError?.(e); local.destroy(); });
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(options.port ?? 0, host, () => resolve()); });
  return {
    host,
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => { for (const s of open_) s.destroy(); server.close(() => resolve()); }),
  };
}

import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { isErrorCode, type ErrorBody } from '@shellbase/protocol';
import { ConnectionError, errorFromBody } from './errors.js';

/** The Upgrade protocol of the API's TCP tunnels. */
const PROTOCOL = 'shellbase-tcp';

/**
 * One TCP connection to a service through the API (`GET …/connect` upgraded to
 * `shellbase-tcp`, with the API key): resolves to the socket once the service
 * is awake and its port accepted, or rejects with the API's typed error.
 */
export function openTunnel(baseUrl: string, path: string, apiKey: string | undefined): Promise<Socket> {
  const url = new URL(path, `${baseUrl}/`);
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: 'GET',
      headers: { connection: 'Upgrade', upgrade: PROTOCOL, ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
    });
    req.once('upgrade', (_res, socket: Socket, head: Buffer) => {
      if (head.length) socket.unshift(head);
      resolve(socket);
    });
    req.once('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.once('end', () => {
        const text = Buffer.concat(chunks).toString();
        let body: ErrorBody = { code: 'internal', message: `HTTP ${res.statusCode}: ${text.slice(0, 500)}` };
        try {
          const parsed = JSON.parse(text) as { error?: ErrorBody };
          if (parsed.error && isErrorCode(parsed.error.code)) body = parsed.error;
        } catch { /* not JSON */ }
        reject(errorFromBody(body, res.statusCode ?? 500));
      });
    });
    req.once('error', (e) => reject(new ConnectionError({
      code: 'unavailable', message: `cannot reach the shellbase server at ${baseUrl}: ${(e as NodeJS.ErrnoException).code ?? e.message}`,
      hint: 'check SHELLBASE_URL', details: { url: baseUrl },
    }, 0, { cause: e })));
    req.end();
  });
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

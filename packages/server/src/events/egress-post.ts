import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { Egress, SessionSpec } from '../net/egress.js';

/** What a POST got back: the status, or why there was none. */
export type PostOutcome = { status: number } | { error: string };

/** Longest a delivery may take, from the proxy's answer to the receiver's status. */
const POST_TIMEOUT_MS = 10_000;

/**
 * POSTs `body` to `url` through the egress enforcement point, as a sandbox's connection would go:
 * a session of the server's own under `spec` (the tenant's policy; the connection is in its audit
 * log with kind `webhook`), an HTTP CONNECT to the URL's host and port on the session's socket,
 * then HTTP or TLS over the tunnel. A refusal by the policy or the address rules comes back as the error.
 */
export async function postThroughEgress(egress: Egress, spec: SessionSpec, url: URL, headers: Record<string, string>, body: string, signal?: AbortSignal): Promise<PostOutcome> {
  const session = await egress.own(spec);
  try {
    const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
    const host = url.hostname.replace(/^\[|\]$/g, '');
    let socket: Socket;
    try {
      socket = await tunnel(session.socket, host, port);
    } catch (e) {
      return { error: (e as Error).message };
    }
    const stream = url.protocol === 'https:' ? tlsConnect({ socket, servername: host }) : socket;
    return await new Promise<PostOutcome>((resolve) => {
      const stop = () => { stream.destroy(); resolve({ error: 'the server is shutting down' }); };
      if (signal?.aborted) { stop(); return; }
      signal?.addEventListener('abort', stop, { once: true });
      const req = request({
        createConnection: () => stream, method: 'POST', host, port, path: `${url.pathname}${url.search}`,
        headers: { ...headers, host: url.host, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), 'user-agent': 'shellbase-webhooks/1' },
        timeout: POST_TIMEOUT_MS,
      }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0 }));
        res.on('error', (e) => resolve({ error: e.message }));
      });
      req.on('timeout', () => { req.destroy(new Error(`no answer within ${POST_TIMEOUT_MS} ms`)); });
      req.on('error', (e) => resolve({ error: e.message }));
      req.end(body);
    });
  } finally {
    await session.close().catch(() => undefined);
  }
}

/** A connection to host:port made through the proxy on `path` (HTTP CONNECT); rejects with the proxy's reason. */
function tunnel(path: string, host: string, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(path);
    let head = Buffer.alloc(0);
    const fail = (e: Error) => { s.destroy(); reject(e); };
    s.setTimeout(POST_TIMEOUT_MS, () => fail(new Error('the egress proxy did not answer')));
    s.once('error', fail);
    s.once('connect', () => s.write(`CONNECT ${host.includes(':') ? `[${host}]` : host}:${port} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`));
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) { if (head.length > 16_384) fail(new Error('the egress proxy answered with an overlong head')); return; }
      s.off('data', onData);
      s.off('error', fail);
      s.setTimeout(0);
      const text = head.subarray(0, end).toString('latin1');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
      if (status !== 200) {
        const why = head.subarray(end + 4).toString('utf8').trim() || text.split('\r\n')[0];
        fail(new Error(`refused by the egress proxy: ${why}`));
        return;
      }
      const rest = head.subarray(end + 4);
      if (rest.length) s.unshift(rest);
      resolve(s);
    };
    s.on('data', onData);
  });
}

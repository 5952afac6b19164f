import { request } from 'node:http';
import { connect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { Egress, SessionSpec } from '../net/egress.js';

/** What a POST got back: the status, or why there was none. */
export type PostOutcome = { status: number } | { error: string };

/** Longest an attempt may take, from asking the proxy to the receiver's status line and headers. */
export const POST_TIMEOUT_MS = 10_000;

/**
 * POSTs `body` to `url` through the egress enforcement point, as a sandbox's connection would go:
 * a session of the server's own under `spec` (the tenant's policy; the connection is in its audit
 * log with kind `webhook`), an HTTP CONNECT to the URL's host and port on the session's socket,
 * then HTTP or TLS over the tunnel. A refusal by the policy or the address rules comes back as the error.
 */
export async function postThroughEgress(egress: Egress, spec: SessionSpec, url: URL, headers: Record<string, string>, body: string, signal?: AbortSignal): Promise<PostOutcome> {
  const session = await egress.own(spec);
  // One deadline over everything: the proxy, TLS, the request and the receiver's answer.
  const deadline = AbortSignal.any([AbortSignal.timeout(POST_TIMEOUT_MS), ...(signal ? [signal] : [])]);
  try {
    const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
    const host = url.hostname.replace(/^\[|\]$/g, '');
    let socket: Socket;
    try {
      socket = await tunnel(session.socket, host, port, deadline);
    } catch (e) {
      return { error: (e as Error).message };
    }
    const stream = url.protocol === 'https:' ? tlsConnect({ socket, ...(isIP(host) ? {} : { servername: host }) }) : socket;
    return await new Promise<PostOutcome>((resolve) => {
      const done = (outcome: PostOutcome) => {
        deadline.removeEventListener('abort', stop);
        stream.destroy();
        resolve(outcome);
      };
      const stop = () => done({ error: signal?.aborted ? 'the server is shutting down' : `no answer within ${POST_TIMEOUT_MS} ms` });
      if (deadline.aborted) { stop(); return; }
      deadline.addEventListener('abort', stop, { once: true });
      const req = request({
        createConnection: () => stream, method: 'POST', host, port, path: `${url.pathname}${url.search}`,
        headers: { ...headers, host: url.host, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), 'user-agent': 'shellbase-webhooks/1' },
      }, (res) => done({ status: res.statusCode ?? 0 })); // the status is the answer: the body is not read
      req.on('error', (e) => done({ error: e.message }));
      req.end(body);
    });
  } finally {
    await session.close().catch(() => undefined);
  }
}

/** A connection to host:port made through the proxy on `path` (HTTP CONNECT); rejects with the proxy's reason. */
function tunnel(path: string, host: string, port: number, deadline: AbortSignal): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(path);
    let head = Buffer.alloc(0);
    let settled = false;
    const cleanup = () => { settled = true; deadline.removeEventListener('abort', onAbort); s.off('error', fail); s.off('close', onClose); s.off('data', onData); };
    const fail = (e: Error) => { if (settled) return; cleanup(); s.destroy(); reject(e); };
    const onAbort = () => fail(new Error('the egress proxy did not answer in time'));
    const onClose = () => fail(new Error('the egress proxy closed the connection without an answer'));
    if (deadline.aborted) { onAbort(); return; }
    deadline.addEventListener('abort', onAbort, { once: true });
    s.once('error', fail);
    s.once('close', onClose);
    s.once('connect', () => s.write(`CONNECT ${host.includes(':') ? `[${host}]` : host}:${port} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`));
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) { if (head.length > 16_384) fail(new Error('the egress proxy answered with an overlong head')); return; }
      cleanup();
      const text = head.subarray(0, end).toString('latin1');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
      if (status !== 200) {
        // The proxy's reason follows the head; it closes the connection after it.
        let rest = head.subarray(end + 4);
        const give = () => { s.destroy(); reject(new Error(`refused by the egress proxy: ${rest.toString('utf8').trim() || text.split('\r\n')[0]}`)); };
        s.on('data', (c: Buffer) => { if (rest.length < 4096) rest = Buffer.concat([rest, c]); });
        s.once('close', give);
        s.on('error', () => undefined);
        setTimeout(give, 1000).unref();
        return;
      }
      s.on('error', () => undefined); // the request below reports the socket's errors
      const rest = head.subarray(end + 4);
      if (rest.length) s.unshift(rest);
      resolve(s);
    };
    s.on('data', onData);
  });
}

import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { FORWARDED, type Peers } from '../core/peers.js';
import { ShellbaseError } from '../errors.js';
import { connectWithin } from '../util/connect-within.js';
import { failUpgrade, HOP_BY_HOP } from './http-relay.js';

// Cluster mode: a request for a target another worker runs is passed to that worker as it came
// (its Host, path and API key, which the receiving worker checks again), with this worker's proof
// (core/peers.ts) in `x-shellbase-forwarded`; over TLS when the worker's advertised URL is https.

export { FORWARDED };

const unanswered = (to: string, err: Error) => new ShellbaseError('unavailable', `the worker running it (${to}) did not answer: ${err.message}`, { hint: 'retry shortly' });

/**
 * Whether a request was passed here by another worker: false when unmarked; true when marked with
 * a valid proof (it is then served here, never passed on again); throws `unauthorized` when marked
 * without one, or, with mutual TLS, over a connection without a worker's client certificate (or
 * when this server is no cluster's worker).
 */
export function forwardedHere(req: IncomingMessage, peers: Peers | undefined): boolean {
  const proof = req.headers[FORWARDED];
  if (proof === undefined) return false;
  if (!peers) throw new ShellbaseError('unauthorized', `${FORWARDED} is for the workers of a cluster`, { hint: `do not send ${FORWARDED}` });
  peers.check(Array.isArray(proof) ? proof.join(',') : proof, req.method ?? 'GET', req.headers.host ?? '', req.url ?? '/');
  peers.checkConnection(req.socket);
  return true;
}

/**
 * Passes a request as it came (Host, path, API key) to the worker at `to` (its gateway, or its
 * API), which checks it again and serves it. `body`: the request's body when the API has read it
 * already (the stream is spent then).
 */
export function forwardRequest(to: string, req: IncomingMessage, res: ServerResponse, fail: (err: unknown) => void, peers: Peers, body?: Buffer): void {
  const target = new URL(to);
  const path = req.url ?? '/';
  const headers: Record<string, string | string[] | undefined> = { ...req.headers, [FORWARDED]: peers.prove(req.method ?? 'GET', req.headers.host ?? '', path) };
  for (const h of HOP_BY_HOP) delete headers[h];
  if (body) headers['content-length'] = String(body.length);
  const request = target.protocol === 'https:' ? httpsRequest : httpRequest;
  const up = request({ host: target.hostname.replace(/^\[|\]$/g, ''), port: target.port, method: req.method, path, headers, ...peers.tls }, (upRes) => {
    const out = { ...upRes.headers };
    for (const h of HOP_BY_HOP) delete out[h];
    res.writeHead(upRes.statusCode ?? 502, out);
    res.flushHeaders();
    upRes.pipe(res);
  });
  up.on('socket', (socket) => connectWithin(socket as Socket));
  up.on('error', (err) => fail(unanswered(to, err)));
  res.once('close', () => { if (!res.writableFinished) up.destroy(); });
  if (body) up.end(body); else req.pipe(up);
}

/** An upgrade passed to the worker that runs its target (its gateway, or its API for a TCP tunnel), then a byte pipe both ways. */
export function forwardUpgrade(to: string, req: IncomingMessage, socket: Duplex, head: Buffer, peers: Peers): void {
  const target = new URL(to);
  const up = peers.connect(target, () => {
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      if (req.rawHeaders[i].toLowerCase() !== FORWARDED) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    }
    lines.push(`${FORWARDED}: ${peers.prove(req.method ?? 'GET', req.headers.host ?? '', req.url ?? '/')}`);
    up.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length) up.write(head);
    up.pipe(socket);
    socket.pipe(up);
  });
  up.on('error', (err) => failUpgrade(socket, unanswered(to, err)));
  socket.on('error', () => up.destroy());
  socket.on('close', () => up.destroy());
  // The other worker closed: what it sent is flushed, then the client's socket closes too (paused,
  // it would never read the client's end and keep this server from closing).
  up.on('close', () => closeAfterWrites(socket));
}

/** Ends `socket` (unless ended already) and destroys it once what was written is flushed. */
function closeAfterWrites(socket: Duplex): void {
  if (socket.destroyed) return;
  if (socket.writableFinished) { socket.destroy(); return; }
  socket.once('finish', () => socket.destroy());
  if (!socket.writableEnded) socket.end();
}

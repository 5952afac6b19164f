import { request, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { ShellbaseError } from '../errors.js';
import { failUpgrade, HOP_BY_HOP } from './gateway.js';

// Cluster mode: a request for a target another worker runs is passed to that worker as it came
// (its Host, path and API key, which the receiving worker checks again).

/** Marks a request one worker's gateway passed to another's, which then serves it itself. */
export const FORWARDED = 'x-shellbase-forwarded';

/**
 * Passes a gateway request as it came (Host, path, API key) to the gateway of the worker that
 * runs its target (cluster mode); that gateway checks it again and serves it.
 */
export function forwardRequest(to: string, req: IncomingMessage, res: ServerResponse, fail: (err: unknown) => void): void {
  const target = new URL(to);
  const headers: Record<string, string | string[] | undefined> = { ...req.headers, [FORWARDED]: '1' };
  for (const h of HOP_BY_HOP) delete headers[h];
  const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers }, (upRes) => {
    const out = { ...upRes.headers };
    for (const h of HOP_BY_HOP) delete out[h];
    res.writeHead(upRes.statusCode ?? 502, out);
    res.flushHeaders();
    upRes.pipe(res);
  });
  up.on('error', (err) => fail(new ShellbaseError('unavailable', `the worker running it (${to}) did not answer: ${err.message}`, { hint: 'retry shortly' })));
  res.once('close', () => { if (!res.writableFinished) up.destroy(); });
  req.pipe(up);
}

/** An upgrade passed to the worker that runs its target (its gateway, or its API for a TCP tunnel), then a byte pipe both ways. */
export function forwardUpgrade(to: string, req: IncomingMessage, socket: Duplex, head: Buffer): void {
  const target = new URL(to);
  const up = connect(Number(target.port), target.hostname.replace(/^\[|\]$/g, ''), () => {
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    lines.push(`${FORWARDED}: 1`);
    up.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length) up.write(head);
    up.pipe(socket);
    socket.pipe(up);
  });
  up.on('error', (err) => failUpgrade(socket, new ShellbaseError('unavailable', `the worker running it (${to}) did not answer: ${err.message}`, { hint: 'retry shortly' })));
  socket.on('error', () => up.destroy());
  socket.on('close', () => up.destroy());
}


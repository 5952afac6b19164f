import type { FastifyReply, FastifyRequest } from 'fastify';
import { fstatSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { TLSSocket } from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { written, type ByteSink } from '../util/sink.js';
import { abortOnClose } from './ndjson.js';

/**
 * The descriptor of a request's connection, where a helper may write the response's body into it:
 * a GET over plain TCP (TLS is this process's to encrypt) in HTTP/1.1 (whose chunked encoding the
 * helper writes), whose response is the connection's current one (a pipelined request's waits for
 * those before it). Null otherwise: the body then goes through this process.
 */
export function plainConnection(req: FastifyRequest, reply: FastifyReply): number | null {
  const socket = req.raw.socket as (typeof req.raw.socket & { _handle?: { fd?: unknown } }) | null;
  if (req.method !== 'GET' || req.raw.httpVersion !== '1.1' || !socket || socket instanceof TLSSocket || reply.raw.socket !== socket) return null;
  const fd = socket._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : null;
}

/**
 * An archive as a chunked response written partly by this process and partly by helpers that
 * write into the connection itself (engine/transfer/send.ts): the head and the small entries
 * through the response, each large layer by its helper once what came before is on the wire, the
 * end (the zero-length chunk) through the response again. A failure after the head cuts the
 * response short (its chunked body has no end), which clients see as an error.
 */
export async function sendArchive(req: FastifyRequest, reply: FastifyReply, fd: number, headers: Record<string, string>, archive: { writeTo(sink: ByteSink): Promise<void> }): Promise<void> {
  const res = reply.raw;
  const signal = abortOnClose(reply);
  reply.hijack();
  res.writeHead(200, { ...headers, 'transfer-encoding': 'chunked' });
  const sink: ByteSink = {
    write: (bytes) => written(res, res.write(bytes)),
    connection: { pid: process.pid, fd, inode: fstatSync(fd, { bigint: true }).ino, signal, flushed: () => flushed(res) },
  };
  try {
    await archive.writeTo(sink);
    res.end();
  } catch (e) {
    req.log.warn({ err: e }, 'export cut short');
    res.destroy();
  }
}

/**
 * Resolves once everything written on the response so far is in the kernel's hands: looked at
 * again after 1, 2, 4 … ms, at most every 50 ms (a client that stops reading holds it).
 */
async function flushed(res: ServerResponse): Promise<void> {
  await new Promise(setImmediate); // the response uncorks its socket on the next tick
  for (let wait = 1; ; wait = Math.min(50, wait * 2)) {
    if (res.destroyed || !res.socket || res.socket.destroyed) throw new Error('the archive\'s reader went away');
    if (res.writableLength === 0) return;
    await sleep(wait);
  }
}

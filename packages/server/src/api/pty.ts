import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { PTY_KEY_PREFIX, PTY_PROTOCOL, type ErrorBody, type PtyMessage } from '@shellbase/protocol';
import type { Caller } from '../core/deps.js';
import type { Peers } from '../core/peers.js';
import type { Operations } from '../ops/dispatch.js';
import { ShellbaseError, invalid, notFound } from '../errors.js';
import { acceptWebSocket, CLOSE, isWebSocketRequest, offeredProtocols, type WebSocketConnection } from '../util/websocket.js';
import { forwardedHere, forwardUpgrade } from './forward.js';
import { reject } from './tunnel.js';

const PTY_PATH = /^\/v1\/machines\/([^/?#]+)\/pty(?:\?(.*))?$/;
/** Input (keys, a paste) in one message, and output queued for a slow reader, at most. */
const MAX_MESSAGE_BYTES = 1 << 20;
const MAX_BUFFERED_BYTES = 16 << 20;
/** Terminals open at once per tenant on one server (each may hold MAX_BUFFERED_BYTES for a slow reader). */
export const MAX_PTYS_PER_TENANT = 16;

/**
 * The API key of a PTY request: its `Authorization` header, else the subprotocol
 * `shellbase-key.BASE64URL(KEY)` a browser offers (it cannot set headers on a WebSocket).
 */
export function ptyAuthorization(req: IncomingMessage, offered: string[]): string | undefined {
  if (req.headers.authorization) return req.headers.authorization;
  const carried = offered.find((p) => p.startsWith(PTY_KEY_PREFIX));
  return carried ? `Bearer ${Buffer.from(carried.slice(PTY_KEY_PREFIX.length), 'base64url').toString()}` : undefined;
}

/** The machine id in the path, decoded (one that does not decode is no machine's: 404). */
function machineId(raw: string): string {
  try { return decodeURIComponent(raw); } catch { throw notFound('machine', raw); }
}

/** `cols` and `rows` of the query (1 to 1000 each; default 80 × 24); any other parameter is refused. */
function sizeOf(query: string | undefined): { cols: number; rows: number } {
  const size = { cols: 80, rows: 24 };
  for (const [k, v] of new URLSearchParams(query ?? '')) {
    if (k !== 'cols' && k !== 'rows') throw invalid(`unknown parameter ${JSON.stringify(k)} in querystring`, 'pass cols and rows only', { field: 'querystring', unknownField: k });
    if (!/^\d{1,4}$/.test(v)) throw invalid(`querystring.${k} must be an integer`, `pass ${k} between 1 and 1000`, { field: `querystring.${k}` });
    size[k] = Number(v);
  }
  return size;
}

/**
 * `GET /v1/machines/{id}/pty` as a WebSocket: root's login shell on a terminal in the machine.
 * Everything is checked before the handshake is answered (an error is the API's JSON error with
 * its status): the request's form, the key, the machine (the caller's own, else 404), its state,
 * the size. In a cluster, a machine another worker runs is reached through that worker, as the
 * other calls about machines are (api/routing.ts). Returns false for other paths.
 */
export function ptyUpgrades(ops: Operations, log: Logger, peers?: Peers): (req: IncomingMessage, socket: Duplex, head: Buffer) => boolean {
  const open = new Map<string, number>();
  return (req, socket, head) => {
    const m = PTY_PATH.exec(req.url ?? '');
    if (!m) return false;
    socket.on('error', () => socket.destroy());
    void (async () => {
      if (!isWebSocketRequest(req)) throw invalid('the PTY is a WebSocket: GET with Upgrade: websocket and Sec-WebSocket-Version: 13', `offer the subprotocol ${PTY_PROTOCOL}`);
      const offered = offeredProtocols(req);
      if (!offered.includes(PTY_PROTOCOL)) throw invalid(`offer the WebSocket subprotocol ${PTY_PROTOCOL}`, `Sec-WebSocket-Protocol: ${PTY_PROTOCOL}`);
      const passed = forwardedHere(req, peers);
      const caller = await ops.begin(ptyAuthorization(req, offered));
      let handedOver = false;
      try {
        const id = machineId(m[1]);
        const size = sizeOf(m[2]);
        const there = await ops.where({ machine: id }, caller, passed);
        if (there) { forwardUpgrade(there, req, socket, head, peers!); return; }
        // Counted where the terminal is served (in a cluster, on the worker that runs the machine).
        const count = open.get(caller.tenantId) ?? 0;
        if (count >= MAX_PTYS_PER_TENANT) {
          throw new ShellbaseError('limit_exceeded', `${MAX_PTYS_PER_TENANT} terminals are open for this tenant already`, {
            details: { limit: MAX_PTYS_PER_TENANT }, hint: 'close a terminal you do not use',
          });
        }
        open.set(caller.tenantId, count + 1);
        try {
          await serve(ops, caller, id, size, req, socket, head);
          handedOver = true;
        } finally {
          const done = () => { const n = (open.get(caller.tenantId) ?? 1) - 1; if (n > 0) open.set(caller.tenantId, n); else open.delete(caller.tenantId); };
          if (!handedOver || socket.destroyed) done(); else socket.once('close', done);
        }
      } finally {
        if (!handedOver || socket.destroyed) caller.hold.release();
        else socket.once('close', () => caller.hold.release());
      }
    })().catch((err: unknown) => {
      if (!(err instanceof ShellbaseError)) log.error({ err }, 'pty failed');
      reject(socket, err instanceof ShellbaseError ? err : new ShellbaseError('internal', 'internal error'));
    });
    return true;
  };
}

/** Starts the shell, then answers the handshake and carries the terminal both ways until either side ends. */
async function serve(ops: Operations, caller: Caller, id: string, size: { cols: number; rows: number }, req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
  let ws: WebSocketConnection | null = null;
  const early: Buffer[] = [];
  const session = await ops.run(caller, 'machine.pty', { id, size, onOutput: (c) => { if (ws) ws.send(Buffer.from(c)); else early.push(Buffer.from(c)); } });
  if (socket.destroyed) { session.close(); return; }
  const conn = acceptWebSocket(req, socket, head, PTY_PROTOCOL, { maxMessageBytes: MAX_MESSAGE_BYTES, maxBufferedBytes: MAX_BUFFERED_BYTES });
  ws = conn;
  for (const c of early.splice(0)) conn.send(c);
  const control = (m: PtyMessage | { type: 'error'; error: ErrorBody }) => conn.send(JSON.stringify(m));
  const failed = (e: unknown) => {
    const err = e instanceof ShellbaseError ? e : new ShellbaseError('unavailable', `machine ${id} went away under its terminal (hibernated, stopped or deleted): ${(e as Error).message}`, {
      hint: 'see its state; opening the terminal again wakes a hibernated machine',
    });
    control({ type: 'error', error: err.toBody() });
  };
  conn.onMessage = (data, binary) => {
    if (binary) { session.input(data).catch(failed); return; }
    let msg: Partial<PtyMessage>;
    try { msg = JSON.parse(data.toString()) as Partial<PtyMessage>; } catch { msg = {}; }
    if (msg.type === 'resize' && typeof msg.cols === 'number' && typeof msg.rows === 'number') session.resize(msg.cols, msg.rows).catch(failed);
    else failed(invalid('a text frame is a control message: {"type":"resize","cols":N,"rows":N}', 'send the terminal\'s bytes as binary frames'));
  };
  conn.onClose = () => session.close();
  session.exited.then((exit) => {
    control({ type: 'exit', exitCode: exit.code, ...(exit.signal ? { signal: exit.signal } : {}) });
    conn.close(CLOSE.normal, 'the shell ended');
  }, (e: unknown) => {
    failed(e);
    conn.close(CLOSE.error, 'the machine went away');
  });
}

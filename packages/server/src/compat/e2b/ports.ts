import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { PortProxy } from '../../api/gateway.js';
import { failUpgrade } from '../../api/http-relay.js';
import { ShellbaseError } from '../../errors.js';
import { connectTarget, type PortTarget } from '../../util/pipe.js';

/** A sandbox that is not running (never was, killed, or paused without autoResume) named by E2B-style port traffic. */
export class SandboxNotRunning extends ShellbaseError {
  constructor(readonly sandboxId: string) {
    super('unavailable', `sandbox ${sandboxId} is not running`, { details: { sandbox: sandboxId }, hint: 'connect to a paused sandbox to resume it' });
  }
}

/** Which sandbox and guest port a request names (a `<port>-<id>.<domain>` Host, or E2B's headers). */
export type PortOf = (req: IncomingMessage) => { id: string; port: number } | null;

/**
 * How E2B's edge answers traffic to a guest port that cannot be reached, as the SDKs expect it:
 * 502, with a JSON body naming the sandbox (and the port, when the sandbox runs but nothing
 * listens there). Null for failures that keep their own status (a missing traffic token: 403).
 */
function edgeAnswer(err: unknown, to: { id: string; port: number } | null): { status: 502; body: object } | null {
  if (!(err instanceof ShellbaseError)) return null;
  const sandboxId = to?.id;
  if (err instanceof SandboxNotRunning || err.code === 'not_found') {
    return { status: 502, body: { code: 502, message: 'The sandbox was not found', sandboxId: err instanceof SandboxNotRunning ? err.sandboxId : sandboxId } };
  }
  if (err.code === 'unavailable') {
    return { status: 502, body: { code: 502, message: 'The sandbox is running but port is not open', sandboxId, port: to?.port } };
  }
  return null;
}

/**
 * The port proxy of E2B-style traffic (compat/e2b/index.ts): the gateway's, but failures are
 * E2B's edge answers (edgeAnswer) instead of shellbase's own 503s, which the gateway keeps for
 * services and exposed machine ports reached by token.
 */
export class E2bPortProxy extends PortProxy {
  constructor(log: Logger, private readonly portOf: PortOf) {
    super(log);
  }

  override fail(res: ServerResponse, err: unknown): void {
    const answer = edgeAnswer(err, res.req ? this.portOf(res.req) : null);
    if (!answer) { super.fail(res, err); return; }
    if (res.headersSent) { res.destroy(); return; }
    const body = JSON.stringify(answer.body);
    res.writeHead(answer.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) }).end(body);
  }

  /**
   * An upgrade (a WebSocket) becomes a byte pipe to the guest port, as on the gateway; when the
   * port closes the connection before answering anything (nobody listens there), the client gets
   * the edge's 502 instead of a connection closed without a word.
   */
  override async upgrade(run: PortTarget, req: IncomingMessage, socket: Duplex, head: Buffer, path: string): Promise<void> {
    const { up, release } = await connectTarget(() => run.acquire()).catch((e: unknown) => {
      throw new ShellbaseError('unavailable', `${run.name} refused the connection`, { cause: e });
    });
    let answered = false;
    let released = false;
    const done = () => {
      if (!released) { released = true; release(); }
      socket.destroy();
      up.destroy();
    };
    if (socket.destroyed) { done(); return; }
    up.once('data', () => { answered = true; });
    up.once('close', () => {
      if (answered || socket.destroyed) { done(); return; }
      if (!released) { released = true; release(); }
      this.failUpgrade(req, socket, new ShellbaseError('unavailable', `${run.name} closed the connection`));
    });
    up.on('error', () => undefined); // its close follows, and answers
    socket.once('close', done);
    socket.on('error', done);
    up.write(this.preface(run, req, path));
    if (head.length) up.write(head);
    socket.pipe(up);
    up.pipe(socket, { end: false });
  }

  /** An upgrade (a WebSocket) that cannot be passed through: the same answers, and the socket closes. */
  failUpgrade(req: IncomingMessage, socket: Duplex, err: unknown): void {
    const answer = edgeAnswer(err, this.portOf(req));
    if (!answer) { failUpgrade(socket, err); return; }
    socket.once('finish', () => socket.destroy());
    socket.end(`HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${JSON.stringify(answer.body)}`);
  }
}

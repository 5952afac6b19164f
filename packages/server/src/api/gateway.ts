import { Agent, createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type ServerOptions as TlsOptions } from 'node:https';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { FORWARDED, type Peers } from '../core/peers.js';
import type { Operations } from '../ops/dispatch.js';
import type { PortTarget } from '../util/pipe.js';
import { forwardedHere, forwardRequest, forwardUpgrade } from './forward.js';
import { HOP_BY_HOP, failUpgrade, toError } from './http-relay.js';
import { ShellbaseError, notFound } from '../errors.js';

/** Which service a request is for: `{token}.localhost[:port]` or the `/s/{token}/` prefix. */
export function route(host: string | undefined, url: string): { token: string; path: string } | null {
  const byHost = /^([a-z2-7]{26})\.localhost(?::\d+)?$/i.exec(host ?? '');
  if (byHost) return { token: byHost[1].toLowerCase(), path: url };
  const byPath = /^\/s\/([a-z2-7]{26})(\/.*|\?.*)?$/.exec(url);
  if (byPath) return { token: byPath[1], path: byPath[2]?.startsWith('/') ? byPath[2] : `/${byPath[2] ?? ''}` };
  return null;
}

/**
 * The gateway: one HTTP server for every service and every exposed machine
 * port (`resolve` finds what a token names). It wakes the target a request
 * names, holds the request until its port accepts, and passes it through
 * (bodies streamed both ways, so server-sent events flow; WebSocket and other
 * upgrades become a raw byte pipe). An unknown token is a 404 that says
 * nothing of which targets exist.
 */
export interface GatewayOptions {
  /** In a cluster: how requests for targets on other workers are passed on, and proofs checked. */
  peers?: Peers;
  /** Serve HTTPS with this certificate and key (SHELLBASE_TLS_CERT, SHELLBASE_TLS_KEY). */
  tls?: TlsOptions;
}

export function startGateway(ops: Pick<Operations, 'portByToken' | 'authenticate' | 'where'>, log: Logger, { peers, tls }: GatewayOptions = {}): Server {
  const proxy = new PortProxy(log);

  const serve = (req: IncomingMessage, res: ServerResponse) => {
    void handle(req, res).catch((err) => fail(res, err));
  };
  const server: Server = tls ? createTlsServer(tls, serve) : createServer(serve);

  async function find(req: IncomingMessage): Promise<{ run: PortTarget; path: string }> {
    const r = route(req.headers.host, req.url ?? '/');
    const run = r && (await ops.portByToken(r.token));
    if (!r || !run) throw notFound('service', 'this address');
    if (run.owner.requireKey) await checkKey(req, run, (authorization) => ops.authenticate(authorization));
    return { run, path: r.path };
  }

  /**
   * In a cluster, the gateway of the worker running the target, unless that is this one or the
   * request was passed here (with a valid proof: a marked request without one is refused).
   */
  const elsewhere = (passed: boolean, run: PortTarget) => ops.where({ port: run, door: 'gateway' }, null, passed);

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const passed = forwardedHere(req, peers);
    const { run, path } = await find(req);
    const there = await elsewhere(passed, run);
    if (there) return forwardRequest(there, req, res, (err) => fail(res, err), peers!);
    await proxy.request(run, req, res, path);
  }

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    void (async () => {
      const passed = forwardedHere(req, peers);
      const { run, path } = await find(req);
      const there = await elsewhere(passed, run);
      if (there) return forwardUpgrade(there, req, socket, head, peers!);
      await proxy.upgrade(run, req, socket, head, path);
    })().catch((err: unknown) => failUpgrade(socket, err));
  });

  const fail = (res: ServerResponse, err: unknown) => proxy.fail(res, err);
  server.on('close', () => proxy.close());
  return server;
}

/**
 * Passes requests through to a port target: the gateway's, and any other server's that reaches
 * machines' ports (the E2B-compatible API's `<port>-<id>.<domain>` hosts). Keep-alive agents per
 * Unix socket.
 */
export class PortProxy {
  private readonly agents = new Map<string, Agent>();

  constructor(private readonly log: Logger) {}

  private agentFor(socketPath: string): Agent {
    let a = this.agents.get(socketPath);
    if (!a) { a = new Agent({ keepAlive: true, maxFreeSockets: 16 }); this.agents.set(socketPath, a); }
    return a;
  }

  /** Holds the target awake until the response closes; bodies stream both ways. */
  async request(run: PortTarget, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const { socketPath, release } = await run.acquire();
    res.once('close', release);
    const headers = { ...req.headers };
    for (const h of HOP_BY_HOP) delete headers[h];
    delete headers[FORWARDED]; // another worker's proof: the cluster's, never the target's to see
    if (run.owner.requireKey) delete headers.authorization; // the tenant's key, checked: never the target's to see
    const up = request({ socketPath, path, method: req.method, headers, agent: this.agentFor(socketPath) }, (upRes) => {
      const out = { ...upRes.headers };
      for (const h of HOP_BY_HOP) delete out[h];
      res.writeHead(upRes.statusCode ?? 502, out);
      res.flushHeaders();
      upRes.pipe(res);
      // A body cut off upstream (the target died mid-stream, e.g. its machine was killed) must
      // not end cleanly here, nor hang: pipe() does neither, so break the client's response.
      upRes.once('error', () => res.destroy());
      upRes.once('close', () => { if (!upRes.complete) res.destroy(); });
    });
    up.on('error', (err) => this.fail(res, new ShellbaseError('unavailable', `${run.name} closed the connection: ${err.message}`, { hint: 'see its logs' })));
    res.once('close', () => { if (!res.writableFinished) up.destroy(); });
    req.pipe(up);
  }

  /** An upgrade (WebSocket) becomes a byte pipe to the target. */
  async upgrade(run: PortTarget, req: IncomingMessage, socket: Duplex, head: Buffer, path: string): Promise<void> {
    await run.pipe(socket, [this.preface(run, req, path), head]);
  }

  /** An upgrade's request as the target gets it: without another worker's proof, or an API key checked here. */
  protected preface(run: PortTarget, req: IncomingMessage, path: string): string {
    const lines = [`${req.method} ${path} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i].toLowerCase();
      if (name === FORWARDED || (run.owner.requireKey && name === 'authorization')) continue;
      lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    }
    return `${lines.join('\r\n')}\r\n\r\n`;
  }

  fail(res: ServerResponse, err: unknown): void {
    const e = toError(err);
    if (e.code === 'internal') this.log.error({ err }, 'gateway error');
    if (res.headersSent) { res.destroy(); return; }
    res.writeHead(e.status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify({ error: e.toBody() }));
  }

  close(): void { for (const a of this.agents.values()) a.destroy(); }
}


/** Who an `Authorization` header's API key belongs to (throws 401 for a missing or unknown key). */
export type Authenticate = (authorization: string | undefined) => Promise<{ tenantId: string; admin: boolean }>;

/**
 * `access: "key"`: the URL's token is not enough, the request must carry an
 * API key of the target's tenant (or the admin's). The key is consumed here:
 * the target never sees it.
 */
export async function checkKey(req: IncomingMessage, run: PortTarget, authenticate: Authenticate): Promise<void> {
  if (!req.headers.authorization) {
    throw new ShellbaseError('unauthorized', `${run.name} wants an API key`, { hint: 'send Authorization: Bearer <the tenant\'s API key>; its access is "key"' });
  }
  const who = await authenticate(req.headers.authorization);
  if (who.tenantId !== run.owner.tenantId && !who.admin) {
    throw new ShellbaseError('forbidden', `this API key is not of ${run.name}'s tenant`, { hint: 'use a key of the tenant that owns it' });
  }
}

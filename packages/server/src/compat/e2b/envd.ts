import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Caller } from '../../core/deps.js';
import type { Agent } from '../../machines/index.js';
import type { Operations } from '../../ops/dispatch.js';
import { ConnectError, readMessage, readMessages, sendUnary, sendUnaryError, ServerStream } from './connect.js';
import { checkSignature } from './signed-urls.js';
import { DEFAULT_USER } from './guest.js';
import type { Sandbox, Sandboxes } from './sandboxes.js';

/** One envd call: whose sandbox, as which user, and its guest agent (the machine woken if need be). */
export interface EnvdCall {
  caller: Caller;
  sandbox: Sandbox;
  /** The user the call acts as (`Authorization: Basic base64(user:)`, else the default user). */
  user: string;
  /** The longest timeout a command may ask for (the tenant's maximum `timeoutMs`). */
  maxTimeoutMs: number;
  /** Runs `fn` with the machine's agent, holding the machine awake until it settles. */
  withAgent<T>(fn: (agent: Agent) => Promise<T>): Promise<T>;
}

/** A unary method: the request message in, the response message out. */
export type Unary = (call: EnvdCall, msg: Record<string, unknown>) => Promise<object>;
/** A server-streaming method: writes to `stream`, ending it (with an error or not) when done. */
export type Streaming = (call: EnvdCall, msg: Record<string, unknown>, stream: ServerStream, req: IncomingMessage) => Promise<void>;
/** A client-streaming method: the messages in, one response out. */
export type ClientStreaming = (call: EnvdCall, msgs: AsyncIterable<Record<string, unknown>>) => Promise<object>;

export interface Service {
  unary: Record<string, Unary>;
  streaming: Record<string, Streaming>;
  clientStreaming: Record<string, ClientStreaming>;
}

/** Raw HTTP routes of envd (`/files`, `/health`). */
export type HttpRoute = (call: EnvdCall, req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void>;

/**
 * Cluster mode: passes a request about sandbox `id` as it came to the worker that runs its machine,
 * when that is another live worker (compat/e2b/index.ts); whether it did. Absent when the request
 * was passed here already, or outside a cluster.
 */
export type PassOn = (id: string, req: IncomingMessage, res: ServerResponse) => Promise<boolean>;

/** Why envd traffic finds no sandbox: E2B's proxy answers 502, which the SDK reads as "not running". */
export class NoSandbox extends Error {}

/**
 * envd, the in-sandbox daemon of E2B, served by the server for every sandbox: requests carry
 * `E2b-Sandbox-Id` and `X-Access-Token` (the sandbox's token from create or connect). Connect
 * RPCs go to the services by path (`/process.Process/Start`); `/files` and `/health` are plain
 * HTTP. A paused sandbox answers 502 unless it resumes on traffic (autoResume); a hibernated
 * one that is not paused wakes, as any machine does on use.
 */
export class Envd {
  constructor(
    private readonly sandboxes: Sandboxes,
    private readonly ops: Operations,
    private readonly services: Record<string, Service>,
    private readonly http: Record<string, HttpRoute>,
  ) {}

  /** `passOn`: in a cluster, the request goes to the worker running the sandbox, once its token (or signature) was found to be the sandbox's here. */
  async handle(req: IncomingMessage, res: ServerResponse, sandboxId: string, passOn?: PassOn): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://envd');
    const rpc = /^\/([a-z]+\.[A-Za-z]+)\/([A-Za-z]+)$/.exec(url.pathname);
    const streaming = rpc !== null && /^application\/connect\+json/.test(req.headers['content-type'] ?? '');
    let caller: Caller | null = null;
    try {
      const tenant = await this.sandboxes.tenantOf(sandboxId);
      if (!tenant) throw new NoSandbox(`sandbox ${sandboxId} not found`);
      caller = await this.sandboxes.callerFor(tenant);
      const sandbox = await this.sandboxes.get(caller, sandboxId).catch(() => { throw new NoSandbox(`sandbox ${sandboxId} not found`); });
      const signed = url.pathname === '/files' && url.searchParams.has('signature');
      if (!signed && !sameToken(req.headers['x-access-token'], sandbox.e2b.accessToken)) throw new ConnectError('unauthenticated', 'missing or wrong X-Access-Token');
      // A signed URL is checked here, before it is passed to the worker that runs the sandbox (which checks it again).
      if (signed) checkSignature(sandbox.e2b.accessToken, url, req.method);
      if (passOn && (await passOn(sandboxId, req, res))) return;
      if (url.pathname === '/health') { this.health(sandbox, res); return; }
      if (this.sandboxes.isPaused(sandbox) && !sandbox.e2b.autoResume) throw new NoSandbox(`sandbox ${sandboxId} is paused: connect to it to resume it`);
      if (sandbox.row.state === 'stopped') throw new NoSandbox(`sandbox ${sandboxId} was stopped`);
      const c = caller;
      const call: EnvdCall = {
        caller: c, sandbox, user: userOf(req, url), maxTimeoutMs: this.ops.maxTimeoutMs(c),
        withAgent: async (fn) => {
          // Traffic resumes a sandbox paused with autoResume: it runs (and times out) again.
          if (this.sandboxes.isPaused(sandbox)) await this.sandboxes.connect(c, sandboxId, 300);
          return this.ops.run(c, 'machine.withAgent', { id: sandboxId, fn }) as Promise<Awaited<ReturnType<typeof fn>>>;
        },
      };
      if (!rpc) {
        const route = this.http[`${req.method} ${url.pathname}`];
        if (!route) throw new ConnectError('not_found', `no route ${req.method} ${url.pathname}`);
        await route(call, req, res, url);
        return;
      }
      const service = this.services[rpc[1]];
      const [, , method] = rpc;
      if (service?.streaming[method] && streaming) {
        const msg = await readMessage(req, true);
        const stream = new ServerStream(res);
        await service.streaming[method](call, msg, stream, req).catch((e: unknown) => stream.end(e));
      } else if (service?.clientStreaming[method] && streaming) {
        const reply = await service.clientStreaming[method](call, readMessages(req));
        const stream = new ServerStream(res);
        stream.send(reply);
        stream.end();
      } else if (service?.unary[method] && !streaming) {
        sendUnary(res, await service.unary[method](call, await readMessage(req, false)));
      } else {
        throw new ConnectError('unimplemented', `${rpc[1]}/${method} is not implemented`);
      }
    } catch (e) {
      if (e instanceof NoSandbox) {
        const body = JSON.stringify({ code: 'unavailable', message: e.message });
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
        else res.destroy();
      } else if (streaming && !res.headersSent) {
        new ServerStream(res).end(e);
      } else {
        sendUnaryError(res, e);
      }
    } finally {
      const c = caller;
      if (c) { if (res.writableEnded || res.destroyed) c.hold.release(); else res.once('close', () => c.hold.release()); }
    }
  }

  private health(sandbox: Sandbox, res: ServerResponse): void {
    const running = !this.sandboxes.isPaused(sandbox) && sandbox.row.state !== 'stopped' && sandbox.row.state !== 'paused';
    res.writeHead(running ? 204 : 502).end();
  }
}

function sameToken(got: string | string[] | undefined, want: string): boolean {
  if (typeof got !== 'string') return false;
  const a = createHash('sha256').update(got).digest();
  const b = createHash('sha256').update(want).digest();
  return timingSafeEqual(a, b);
}

/** `Authorization: Basic base64("user:")` (Connect calls) or `?username=` (files); else the default user. */
function userOf(req: IncomingMessage, url: URL): string {
  const basic = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(req.headers.authorization ?? '');
  if (basic) {
    const name = Buffer.from(basic[1], 'base64').toString('utf8').split(':')[0];
    if (name) return name;
  }
  return url.searchParams.get('username') || DEFAULT_USER;
}

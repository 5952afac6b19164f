import { chownSync, mkdirSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, request, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { connect, createServer, isIP, type Server, type Socket } from 'node:net';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import type { NetworkConnection } from '@shellbase/protocol';
import { newId } from '../util/ids.js';
import { SANDBOX_ROOT } from '../util/idmap.js';
import { INSIDE, type Forwarding } from './forwarder.js';
import { allowsHost, describe, type Policy } from './policy.js';
import { socksHandshake, socksReply } from './socks.js';
import type { AddressRules } from './addresses.js';

/** Ports the proxy answers on inside a sandbox (and, for machines, at the guest's 10.0.2.100). */
export const HTTP_PROXY_PORT = 3128;
export const SOCKS_PORT = 1080;

export interface EgressOptions {
  /** Where sessions' socket directories go. */
  dir: string;
  rules: AddressRules;
  /** Resolves a host name to its addresses (the host's resolver, or a test's map in front of it). */
  resolve(host: string): Promise<string[]>;
  /** Open connections at once: per sandbox, per tenant. */
  maxPerSession: number;
  maxPerTenant: number;
  /** Every connection asked for, once it ends (the audit log and the metrics). */
  record(conn: { tenantId: string; context: string } & NetworkConnection): void;
  /** Writes out what `record` holds back (before the log is read). */
  flush(): Promise<void>;
}

export interface SessionSpec {
  tenantId: string;
  context: string;
  kind: NetworkConnection['kind'];
  policy: Policy;
}

/** Bytes a sandbox's connections moved. */
export interface Traffic { bytesOut: number; bytesIn: number }

/**
 * The egress enforcement point: the one way out for queries, services and
 * machines. Each sandbox gets a session: an HTTP proxy (CONNECT and plain
 * requests) and a SOCKS5 proxy on Unix sockets of its own, which its
 * `sbx-forward` exposes at 127.0.0.1:3128 and :1080 (machines reach the HTTP
 * one through QEMU's guestfwd). Every connection is checked here: the host
 * name against the session's policy, then each address the name resolves to
 * against the address rules (no private, loopback, link-local or host
 * address, so DNS rebinding gains nothing: the checked address is the one
 * connected to), then the session's and the tenant's connection limits. A
 * refusal says which policy and which host. Bytes are counted per session.
 */
export class Egress {
  private readonly perTenant = new Map<string, number>();

  constructor(private readonly o: EgressOptions) {
    // Sessions of a server that died are gone with it.
    rmSync(o.dir, { recursive: true, force: true });
    mkdirSync(o.dir, { recursive: true, mode: 0o711 });
  }

  async open(spec: SessionSpec): Promise<EgressSession> {
    const s = new EgressSession(this, spec, path.join(this.o.dir, newId('e')));
    await s.listen();
    return s;
  }

  /** The audit log, written out. */
  flush(): Promise<void> { return this.o.flush(); }

  /** Shutdown: the sessions' sockets go (sandboxes are gone by now) and the audit log is written. */
  async close(): Promise<void> {
    await this.o.flush();
    rmSync(this.o.dir, { recursive: true, force: true });
    mkdirSync(this.o.dir, { recursive: true, mode: 0o711 });
  }

  /** Checks and opens one upstream connection for a session; resolves to the socket or throws a refusal. */
  async dial(s: EgressSession, host: string, port: number): Promise<Socket> {
    const { policy } = s.spec;
    const name = host.replace(/^\[|\]$/g, '');
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Refusal(`bad port ${port}`);
    if (isIP(name) ? policy.egress !== 'public' : !allowsHost(policy, name)) {
      throw new Refusal(`the network policy (${describe(policy)}) does not allow ${name}`);
    }
    const open = this.perTenant.get(s.spec.tenantId) ?? 0;
    if (s.open >= this.o.maxPerSession) throw new Refusal(`this sandbox has ${s.open} connections open (the limit is ${this.o.maxPerSession})`);
    if (open >= this.o.maxPerTenant) throw new Refusal(`the tenant has ${open} connections open (the limit is ${this.o.maxPerTenant})`);
    let addresses: string[];
    try { addresses = isIP(name) ? [name] : await this.o.resolve(name); } catch { throw new Refusal(`${name} does not resolve`); }
    const refusals = addresses.map((a) => this.o.rules.refusal(a));
    const address = addresses.find((_, i) => refusals[i] === null);
    if (address === undefined) throw new Refusal(refusals[0] ? `${name}: ${refusals[0]}` : `${name} has no address`);
    const socket = await new Promise<Socket>((resolve, reject) => {
      const up = connect({ host: address, port });
      up.once('connect', () => resolve(up));
      up.once('error', (e) => reject(new Refusal(`${name}:${port}: ${(e as NodeJS.ErrnoException).code ?? e.message}`, true)));
    });
    s.open++;
    this.perTenant.set(s.spec.tenantId, open + 1);
    socket.once('close', () => {
      s.open--;
      const left = (this.perTenant.get(s.spec.tenantId) ?? 1) - 1;
      if (left > 0) this.perTenant.set(s.spec.tenantId, left); else this.perTenant.delete(s.spec.tenantId);
    });
    return socket;
  }

  /** Logs a connection (stamped with when it was asked for) once it ended; its bytes were counted into the session as they went. */
  record(s: EgressSession, host: string, port: number, traffic: Traffic, refusal?: Refusal, started = new Date()): void {
    this.o.record({
      tenantId: s.spec.tenantId, context: s.spec.context, kind: s.spec.kind, time: started.toISOString(), host, port,
      bytesOut: traffic.bytesOut, bytesIn: traffic.bytesIn, allowed: !refusal || refusal.afterAllowed, ...(refusal ? { reason: refusal.message } : {}),
    });
  }
}

/** Why a connection was not made; `afterAllowed`: the policy let it through but the upstream failed. */
export class Refusal extends Error {
  constructor(message: string, readonly afterAllowed = false) { super(message); }
}

/** One sandbox's way out: its two proxies, and what went through them. */
export class EgressSession {
  readonly traffic: Traffic = { bytesOut: 0, bytesIn: 0 };
  open = 0;
  private http: HttpServer | null = null;
  private socks: Server | null = null;
  private readonly clients = new Set<Duplex>();

  constructor(private readonly egress: Egress, readonly spec: SessionSpec, readonly dir: string) {}

  get httpSocket(): string { return path.join(this.dir, 'http.sock'); }
  get socksSocket(): string { return path.join(this.dir, 'socks.sock'); }

  /** What a query's or service's sandbox needs: the socket directory bound in, the ports forwarded. */
  forwarding(): Forwarding {
    return {
      binds: [{ source: this.dir, target: `${INSIDE}/egress` }],
      pairs: [`${HTTP_PROXY_PORT}=${INSIDE}/egress/http.sock`, `${SOCKS_PORT}=${INSIDE}/egress/socks.sock`],
    };
  }

  async listen(): Promise<void> {
    mkdirSync(this.dir, { mode: 0o700 });
    chownSync(this.dir, SANDBOX_ROOT, SANDBOX_ROOT);
    this.http = createHttpServer((req, res) => void this.plain(req, res));
    this.http.on('connect', (req: IncomingMessage, client: Duplex, head: Buffer) => void this.tunnel(req, client, head));
    this.http.on('connection', (c: Socket) => this.track(c));
    this.socks = createServer((c) => { this.track(c); void this.socksConnection(c); });
    for (const [server, file] of [[this.http, this.httpSocket], [this.socks, this.socksSocket]] as const) {
      await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(file, () => resolve()); });
      chownSync(file, SANDBOX_ROOT, SANDBOX_ROOT);
    }
  }

  private track(c: Duplex): void {
    this.clients.add(c);
    c.once('close', () => this.clients.delete(c));
    c.on('error', () => c.destroy());
  }

  /** `CONNECT host:port`: a byte tunnel (HTTPS, or any TCP a client tunnels). */
  private async tunnel(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    const { host, port } = splitHostPort(req.url ?? '', 443);
    try {
      const up = await this.egress.dial(this, host, port);
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) up.write(head);
      this.pipe(client, up, host, port, head.length);
    } catch (e) {
      const r = e instanceof Refusal ? e : new Refusal(String(e));
      this.egress.record(this, host, port, { bytesOut: 0, bytesIn: 0 }, r);
      const body = `shellbase egress refused ${host}:${port}: ${r.message}\n`;
      client.end(`HTTP/1.1 ${r.afterAllowed ? '502 Bad Gateway' : '403 Forbidden'}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    }
  }

  /** A plain-HTTP request with an absolute URL (`GET http://host/path`). */
  private async plain(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL;
    try { url = new URL(req.url ?? ''); } catch { res.writeHead(400).end('shellbase egress: send an absolute http:// URL to the proxy\n'); return; }
    const port = Number(url.port || 80);
    if (url.protocol !== 'http:') { res.writeHead(400).end('shellbase egress: only http:// URLs without CONNECT\n'); return; }
    let up: Socket;
    try {
      up = await this.egress.dial(this, url.hostname, port);
    } catch (e) {
      const r = e instanceof Refusal ? e : new Refusal(String(e));
      this.egress.record(this, url.hostname, port, { bytesOut: 0, bytesIn: 0 }, r);
      res.writeHead(r.afterAllowed ? 502 : 403, { 'content-type': 'text/plain' }).end(`shellbase egress refused ${url.hostname}:${port}: ${r.message}\n`);
      return;
    }
    const started = new Date();
    const headers = { ...req.headers };
    for (const h of ['proxy-connection', 'proxy-authorization']) delete headers[h];
    // With createConnection and no agent, the request goes over the checked socket and nowhere else.
    const out = request({ createConnection: () => up, path: url.pathname + url.search, method: req.method, headers }, (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, upRes.headers);
      upRes.pipe(res);
    });
    out.on('error', () => res.destroy());
    res.once('close', () => {
      up.destroy();
      // What crossed the upstream socket, headers included.
      const traffic = { bytesOut: up.bytesWritten, bytesIn: up.bytesRead };
      this.traffic.bytesOut += traffic.bytesOut;
      this.traffic.bytesIn += traffic.bytesIn;
      this.egress.record(this, url.hostname, port, traffic, undefined, started);
    });
    req.pipe(out);
  }

  private async socksConnection(client: Socket): Promise<void> {
    let target: { host: string; port: number };
    try { target = await socksHandshake(client); } catch { client.destroy(); return; }
    try {
      const up = await this.egress.dial(this, target.host, target.port);
      client.write(socksReply(0));
      this.pipe(client, up, target.host, target.port, 0);
    } catch (e) {
      const r = e instanceof Refusal ? e : new Refusal(String(e));
      this.egress.record(this, target.host, target.port, { bytesOut: 0, bytesIn: 0 }, r);
      client.end(socksReply(r.afterAllowed ? 5 : 2));
    }
  }

  /** Joins a client and its upstream, counting bytes each way; records the connection when both ends close. */
  private pipe(client: Duplex, up: Socket, host: string, port: number, sent: number): void {
    const traffic: Traffic = { bytesOut: sent, bytesIn: 0 };
    const started = new Date();
    this.traffic.bytesOut += sent;
    client.on('data', (c: Buffer) => { traffic.bytesOut += c.length; this.traffic.bytesOut += c.length; });
    up.on('data', (c: Buffer) => { traffic.bytesIn += c.length; this.traffic.bytesIn += c.length; });
    let done = false;
    const end = () => {
      if (done) return;
      done = true;
      client.destroy();
      up.destroy();
      this.egress.record(this, host, port, traffic, undefined, started);
    };
    client.once('close', end);
    up.once('close', end);
    up.on('error', end);
    client.on('error', end);
    client.pipe(up).pipe(client);
  }

  /**
   * The bytes moved since the last take (one run's worth), once the run's
   * connections have closed (its sandbox is gone, so they close at once; a
   * client still open after a moment is cut).
   */
  async take(): Promise<Traffic> {
    for (let i = 0; this.clients.size > 0 && i < 20; i++) await new Promise((r) => setTimeout(r, 5));
    for (const c of this.clients) c.destroy();
    const t = { ...this.traffic };
    this.traffic.bytesOut = 0;
    this.traffic.bytesIn = 0;
    return t;
  }

  /** Stops answering; open connections are cut. The bytes moved since the last take. */
  async close(): Promise<Traffic> {
    for (const c of this.clients) c.destroy();
    await Promise.all([this.http, this.socks].map((s) => new Promise((r) => (s ? s.close(r) : r(undefined)))));
    rmSync(this.dir, { recursive: true, force: true });
    return this.traffic;
  }
}

/** `host:port`, `[v6]:port` or a bare host. */
function splitHostPort(text: string, fallback: number): { host: string; port: number } {
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(text);
  if (v6) return { host: v6[1], port: Number(v6[2] ?? fallback) };
  const i = text.lastIndexOf(':');
  return i > 0 ? { host: text.slice(0, i), port: Number(text.slice(i + 1)) } : { host: text, port: fallback };
}

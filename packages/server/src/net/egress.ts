import { mkdirSync, rmSync } from 'node:fs';
import { chown, mkdir } from 'node:fs/promises';
import { isIP } from 'node:net';
import path from 'node:path';
import type { Logger } from 'pino';
import type { NetworkConnection } from '@shellbase/protocol';
import { newId } from '../util/ids.js';
import { SANDBOX_ROOT } from '../util/idmap.js';
import type { AddressRules } from './addresses.js';
import { INSIDE, type Forwarding } from './forwarder.js';
import { EgressPlane } from './plane.js';
import { allowsHost, describe, type Policy } from './policy.js';
import { BadAsk, parseAsk, type Ask } from './requests.js';
import { removeTree } from '../util/remove.js';

/** Throws unless `policy` lets a connection to `name` (a host name or an address) go out. */
function checkPolicy(policy: Policy, name: string): void {
  if (isIP(name) ? policy.egress !== 'public' : !allowsHost(policy, name)) throw new Error(`the network policy (${describe(policy)}) does not allow ${name}`);
}

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
  log: Logger;
}

/**
 * A name under `.internal` (a service, `{service}.{context}.internal`): the
 * Unix socket that reaches it from the session's context, or throws why not.
 */
export type InternalRoute = (tenantId: string, context: string, host: string, port: number) => Promise<string>;

export interface SessionSpec {
  tenantId: string;
  context: string;
  kind: NetworkConnection['kind'];
  policy: Policy;
}

/** Bytes a sandbox's connections moved. */
export interface Traffic { bytesOut: number; bytesIn: number }

/** Sessions kept open ahead of the sandboxes that will take them. */
const SPARE_SESSIONS = 2;

/** One connection a sandbox handed over, from its request to its end. */
interface Conn {
  session: EgressSession;
  started: Date;
  host: string;
  port: number;
  /** Set once allowed (it then counts against the limits until it closes). */
  allowed: boolean;
  /** Why it was refused, or why an allowed one failed. */
  reason?: string;
  closed: boolean;
}

/**
 * The egress enforcement point: the one way out for queries, services and
 * machines, under each sandbox's policy. Each sandbox gets a session: a Unix
 * socket its sbx-forward hands the connections to 127.0.0.1:3128 (HTTP
 * proxy) and :1080 (SOCKS5) over to. The bytes go through sbx-egress
 * (native/egress.c, spliced, never copied through here); every decision is
 * made here: the host name against the session's policy, then each address
 * the name resolves to against the address rules (no private, loopback,
 * link-local or host address, so DNS rebinding gains nothing: the checked
 * address is the one connected to), then the session's and the tenant's
 * connection limits. A refusal names the policy and the host.
 */
export class Egress {
  private plane_: EgressPlane | null = null;
  private internal: InternalRoute = async (_t, _c, host) => { throw new Error(`no service ${host}`); };
  private readonly sessions = new Map<string, EgressSession>();
  private readonly conns = new Map<number, Conn>();
  private readonly perTenant = new Map<string, number>();

  constructor(private readonly o: EgressOptions) {
    // Sessions of a server that died are gone with it.
    rmSync(o.dir, { recursive: true, force: true });
    mkdirSync(o.dir, { recursive: true, mode: 0o711 });
  }

  /** sbx-egress, started with the first session (a server whose sandboxes never have egress never starts it). */
  private get plane(): EgressPlane {
    this.plane_ ??= new EgressPlane({
      request: (conn, session, head) => void this.decide(conn, session, head),
      failed: (conn, why) => { const c = this.conns.get(conn); if (c) c.reason = `connecting failed: ${why}`; },
      closed: (conn, bytesOut, bytesIn) => this.ended(conn, { bytesOut, bytesIn }),
      lost: () => {
        for (const id of [...this.conns.keys()]) this.ended(id, { bytesOut: 0, bytesIn: 0 });
        // Sessions opened ahead listened in the process that died: never hand them out.
        for (const s of this.spares.splice(0)) { this.sessions.delete(s.id); void removeTree(s.dir).catch(() => undefined); }
        // Sessions in use (a machine's lives as long as its QEMU) listen again in the new process, started right after this.
        const live = [...this.sessions.values()];
        queueMicrotask(() => {
          for (const s of live) {
            if (!this.sessions.has(s.id)) continue;
            this.plane.open(s.id, s.dir, s.owner).catch((err: unknown) => this.o.log.warn({ err, session: s.id }, 'an egress session could not listen again'));
          }
        });
      },
    }, this.o.log);
    return this.plane_;
  }

  /**
   * A session whose socket host uid `owner` may connect to (the sandboxes' root; a machine's
   * QEMU). Once a first sandboxes' session was asked for, two of those are kept open ahead (a
   * directory, a socket sbx-egress listens on) and given their spec when taken: no sandbox can
   * reach a session before that, since its directory is bound into the sandbox only after.
   */
  async open(spec: SessionSpec, owner: number = SANDBOX_ROOT): Promise<EgressSession> {
    if (owner === SANDBOX_ROOT) {
      const spare = this.spares.shift();
      this.spare();
      if (spare) {
        spare.assign(spec);
        return spare;
      }
    }
    const s = await this.fresh(owner);
    s.assign(spec);
    return s;
  }

  /**
   * A session with no spec yet, for a QEMU launched before it knows its machine's (a ready VM,
   * machines/pool/ready.ts): it refuses every connection until `assign`.
   */
  ahead(owner: number): Promise<EgressSession> {
    if (this.closing) return Promise.reject(new Error('the egress proxy is closing'));
    return this.fresh(owner);
  }

  private readonly spares: EgressSession[] = [];
  private sparing = 0;
  private closing = false;

  private spare(): void {
    while (!this.closing && this.spares.length + this.sparing < SPARE_SESSIONS) {
      this.sparing++;
      this.fresh(SANDBOX_ROOT).then((s) => {
        if (this.closing) void this.closeSession(s); else this.spares.push(s);
      }, (e: unknown) => this.o.log.warn({ err: e }, 'an egress session could not be opened ahead')).finally(() => { this.sparing--; });
    }
  }

  /**
   * A session for the server's own connections (webhook deliveries): a connection to its socket
   * is itself the proxy's client, asking as a sandbox's would (nothing is handed over); only this
   * process's user may connect.
   */
  async own(spec: SessionSpec): Promise<EgressSession> {
    if (this.closing) throw new Error('the egress proxy is closing');
    const s = await this.fresh(process.getuid?.() ?? 0, true);
    s.assign(spec);
    return s;
  }

  private async fresh(owner: number, direct = false): Promise<EgressSession> {
    const s = new EgressSession(this, newId('e'), this.o.dir, owner);
    await mkdir(s.dir, { mode: 0o700 });
    await chown(s.dir, owner, owner);
    this.sessions.set(s.id, s);
    try {
      await this.plane.open(s.id, s.dir, owner, direct);
    } catch (e) {
      this.sessions.delete(s.id);
      await removeTree(s.dir).catch(() => undefined);
      throw e;
    }
    return s;
  }

  /**
   * Cuts a session's connections (each is logged) and stops answering it. Waits for that only when
   * a connection ever asked through the session: no byte moves before this side allows it, and it
   * allows only what it read a request for, so a session without one has nothing to count or log
   * (a request read after this is refused: the session is gone).
   */
  async closeSession(s: EgressSession): Promise<void> {
    const closed = this.plane.close(s.id).catch(() => undefined);
    if (s.asked > 0) await closed;
    this.sessions.delete(s.id);
    // The directory goes once nothing listens in it; its removal need not hold up the answer.
    void closed.then(() => removeTree(s.dir)).catch((err: unknown) => this.o.log.warn({ err, session: s.id }, 'an egress session directory could not be removed'));
  }

  /** sbx-egress's process id, once started (diagnostics and tests). */
  get planePid(): number | undefined { return this.plane_?.pid; }

  /** Where `.internal` names go (the engine's services register it). */
  routeInternal(route: InternalRoute): void { this.internal = route; }

  /** The audit log, written out. */
  flush(): Promise<void> { return this.o.flush(); }

  /** Shutdown: the data plane stops (sandboxes are gone by now) and the audit log is written. */
  async close(): Promise<void> {
    this.closing = true;
    await this.plane_?.stop();
    await this.o.flush();
    rmSync(this.o.dir, { recursive: true, force: true });
  }

  private async decide(id: number, sessionId: string, head: Buffer): Promise<void> {
    const session = this.sessions.get(sessionId);
    let ask: Ask;
    if (session) session.asked++;
    try {
      if (!session?.assigned) throw new BadAsk('no such session', Buffer.alloc(0));
      ask = parseAsk(head);
    } catch (e) {
      this.plane.deny(id, e instanceof BadAsk ? e.answer : Buffer.alloc(0));
      return;
    }
    const conn: Conn = { session, started: new Date(), host: ask.host, port: ask.port, allowed: false, closed: false };
    this.conns.set(id, conn);
    let address: string;
    try {
      address = await this.check(session, ask.host, ask.port);
    } catch (e) {
      conn.reason = (e as Error).message;
      this.plane.deny(id, ask.refused(conn.reason));
      return;
    }
    if (conn.closed) return; // the client gave up while the name resolved
    conn.allowed = true;
    session.open++;
    this.perTenant.set(session.spec.tenantId, (this.perTenant.get(session.spec.tenantId) ?? 0) + 1);
    this.plane.allow(id, address, ask.port, ask.upstream, ask.ok, ask.failed('the connection failed'));
  }

  /** The address to connect to, if the policy, the address rules and the limits allow; else throws why not. */
  private async check(s: EgressSession, host: string, port: number): Promise<string> {
    const { policy, tenantId } = s.spec;
    const name = host.replace(/^\[|\]$/g, '').toLowerCase();
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`bad port ${port}`);
    // Services of the tenant, by name: links, whatever the egress policy (engine/services/links.ts).
    if (!name.endsWith('.internal')) checkPolicy(policy, name);
    const open = this.perTenant.get(tenantId) ?? 0;
    if (s.open >= this.o.maxPerSession) throw new Error(`this sandbox has ${s.open} connections open (the limit is ${this.o.maxPerSession})`);
    if (open >= this.o.maxPerTenant) throw new Error(`the tenant has ${open} connections open (the limit is ${this.o.maxPerTenant})`);
    if (name.endsWith('.internal')) return this.internal(tenantId, s.spec.context, name, port);
    return this.address(name);
  }

  /** The first address of `name` the address rules allow; else throws why none is. */
  private async address(name: string): Promise<string> {
    let addresses: string[];
    try { addresses = isIP(name) ? [name] : await this.o.resolve(name); } catch { throw new Error(`${name} does not resolve`); }
    const refusals = addresses.map((a) => this.o.rules.refusal(a));
    const address = addresses.find((_, i) => refusals[i] === null);
    if (address === undefined) throw new Error(refusals[0] ? `${name}: ${refusals[0]}` : `${name} has no address`);
    return address;
  }

  /**
   * Why a connection to `host` under `policy` would be refused (the policy, then the address rules
   * over what the name resolves to now), or null: what a webhook's URL is checked by when it is
   * registered. The connection itself is decided again when it is made.
   */
  async refusal(policy: Policy, host: string): Promise<string | null> {
    const name = host.replace(/^\[|\]$/g, '').toLowerCase();
    try {
      if (name.endsWith('.internal')) throw new Error(`${name} is a service name, reachable from sandboxes only`);
      checkPolicy(policy, name);
      await this.address(name);
      return null;
    } catch (e) {
      return (e as Error).message;
    }
  }

  private ended(id: number, traffic: Traffic): void {
    const conn = this.conns.get(id);
    if (!conn) return; // denied before it was known (a malformed request)
    this.conns.delete(id);
    conn.closed = true;
    const { session: s } = conn;
    if (conn.allowed) {
      s.open--;
      const left = (this.perTenant.get(s.spec.tenantId) ?? 1) - 1;
      if (left > 0) this.perTenant.set(s.spec.tenantId, left); else this.perTenant.delete(s.spec.tenantId);
      s.traffic.bytesOut += traffic.bytesOut;
      s.traffic.bytesIn += traffic.bytesIn;
    } else if (conn.reason === undefined) {
      return; // the client left before anything was decided
    }
    this.o.record({
      tenantId: s.spec.tenantId, context: s.spec.context, kind: s.spec.kind, time: conn.started.toISOString(), host: conn.host, port: conn.port,
      bytesOut: traffic.bytesOut, bytesIn: traffic.bytesIn, allowed: conn.allowed, ...(conn.reason ? { reason: conn.reason } : {}),
    });
  }
}

/** One sandbox's way out, and what went through it. */
export class EgressSession {
  readonly traffic: Traffic = { bytesOut: 0, bytesIn: 0 };
  open = 0;
  /** Connections that asked through it (requests read from the data plane). */
  asked = 0;
  readonly dir: string;

  private spec_: SessionSpec | null = null;

  /** `owner`: the host uid that connects to its socket. */
  constructor(private readonly egress: Egress, readonly id: string, root: string, readonly owner: number) {
    this.dir = path.join(root, id);
  }

  /** Whose session this is and under which policy (given once, before any sandbox can reach it). */
  get spec(): SessionSpec {
    if (!this.spec_) throw new Error(`egress session ${this.id} has no spec yet`);
    return this.spec_;
  }

  get assigned(): boolean { return this.spec_ !== null; }

  assign(spec: SessionSpec): void {
    if (this.spec_) throw new Error(`egress session ${this.id} was already given`);
    this.spec_ = spec;
  }

  /** Where sbx-forward (or a machine's guestfwd) hands connections over. */
  get socket(): string { return path.join(this.dir, 'egress.sock'); }

  /** What a query's or service's sandbox needs: the socket directory bound in, both ports handed over. */
  forwarding(): Forwarding {
    const inside = `${INSIDE}/egress/egress.sock`;
    return { binds: [{ source: this.dir, target: `${INSIDE}/egress` }], pairs: [], handOver: [`${HTTP_PROXY_PORT}>${inside}`, `${SOCKS_PORT}>${inside}`] };
  }

  /** Connections asked for from now on follow `policy` (open ones go on). */
  setPolicy(policy: Policy): void { this.spec.policy = policy; }

  /** Stops answering; open connections are cut. What went through, in all. */
  async close(): Promise<Traffic> {
    await this.egress.closeSession(this);
    return this.traffic;
  }
}

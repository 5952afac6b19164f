import { createHmac, timingSafeEqual } from 'node:crypto';
import { connect as connectTcp, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { connect as connectTls, TLSSocket } from 'node:tls';
import { FORWARDED, internalTunnelPath, PROOF_VALIDITY_MS, type Peers } from '../core/peers.js';
import { ShellbaseError } from '../errors.js';
import { connectWithin } from '../util/connect-within.js';

/** The protocol of a raw TCP tunnel (api/tunnel.ts's TUNNEL_PROTOCOL). */
const TCP = 'shellbase-tcp';
/** Longest a tunnel's answer head may be. */
const MAX_HEAD = 16 * 1024;

export interface ClusterPeersOptions {
  /** This worker's id (named in its proofs, for the receiver's log). */
  workerId: string;
  /** The cluster secret (at least 32 bytes). */
  secret: Buffer;
  /** The CA other workers' certificates chain to (self-signed clusters), if not the system's. */
  ca?: Buffer;
  /** Mutual TLS: this worker's certificate and key, shown to the workers it connects to, which require one from `ca` on what is passed to them. */
  clientCert?: { cert: Buffer; key: Buffer };
  /** The clock (tests). */
  now?: () => number;
}

/** Proofs are `v1 WORKER MILLISECONDS MAC`; the MAC is base64url HMAC-SHA256 over the lines below. */
const signed = (method: string, host: string, path: string, worker: string, at: string) =>
  ['v1', method.toUpperCase(), host.toLowerCase(), path, worker, at].join('\n');

/** Peers over a shared secret (core/peers.ts): proofs by HMAC, connections over TLS when a URL says https. */
export class ClusterPeers implements Peers {
  readonly tls: { ca?: Buffer; cert?: Buffer; key?: Buffer };
  private readonly now: () => number;

  constructor(private readonly opts: ClusterPeersOptions) {
    if (opts.secret.length < 32) throw new Error('the cluster secret must be at least 32 bytes');
    if (opts.clientCert && !opts.ca) throw new Error('mutual TLS between workers needs the cluster\'s CA');
    this.tls = { ...(opts.ca ? { ca: opts.ca } : {}), ...opts.clientCert };
    this.now = opts.now ?? Date.now;
  }

  private mac(text: string): Buffer {
    return createHmac('sha256', this.opts.secret).update(text).digest();
  }

  prove(method: string, host: string, path: string): string {
    const at = String(this.now());
    return `v1 ${this.opts.workerId} ${at} ${this.mac(signed(method, host, path, this.opts.workerId, at)).toString('base64url')}`;
  }

  check(proof: string | undefined, method: string, host: string, path: string): void {
    const parts = (proof ?? '').split(' ');
    const refuse = (why: string) => new ShellbaseError('unauthorized', `a request marked ${FORWARDED} without a valid proof: ${why}`, {
      hint: `only the cluster's workers (holding its secret) pass requests to each other; clients must not send ${FORWARDED}`,
    });
    if (parts.length !== 4 || parts[0] !== 'v1' || !/^\d{1,15}$/.test(parts[2])) throw refuse('malformed');
    const [, worker, at, given] = parts;
    if (Math.abs(this.now() - Number(at)) > PROOF_VALIDITY_MS) throw refuse('too old (or from a clock far ahead)');
    const want = this.mac(signed(method, host, path, worker, at));
    const got = Buffer.from(given, 'base64url');
    if (got.length !== want.length || !timingSafeEqual(got, want)) throw refuse('the signature does not match');
  }

  checkConnection(socket: Socket): void {
    if (!this.opts.clientCert) return;
    if (!(socket instanceof TLSSocket && socket.authorized)) {
      throw new ShellbaseError('unauthorized', `a request marked ${FORWARDED} without a worker's client certificate`, {
        hint: 'this cluster requires mutual TLS between workers (--tls-client-auth): each worker shows its certificate, issued by --tls-ca',
      });
    }
  }

  /** A TCP or TLS connection to the worker at `url` (its port, or 443/80 by scheme), failed unless made within CONNECT_TIMEOUT_MS. */
  connect(url: URL, onConnect: () => void): Socket {
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const socket = url.protocol === 'https:'
      ? connectTls({ host, port: Number(url.port || 443), servername: /^[\d.:]+$/.test(host) ? undefined : host, ...this.tls }, onConnect)
      : connectTcp(Number(url.port || 80), host, onConnect);
    connectWithin(socket);
    return socket;
  }

  tunnel(api: string, token: string): Promise<Duplex> {
    const url = new URL(api);
    const path = internalTunnelPath(token);
    return new Promise((resolve, reject) => {
      const fail = (e: Error) => reject(new ShellbaseError('unavailable', `the worker running the service (${api}) did not answer: ${e.message}`, { hint: 'retry shortly' }));
      const socket = this.connect(url, () => {
        socket.write([`GET ${path} HTTP/1.1`, `Host: ${url.host}`, 'Connection: Upgrade', `Upgrade: ${TCP}`,
          `${FORWARDED}: ${this.prove('GET', url.host, path)}`, '', ''].join('\r\n'));
      });
      let head = Buffer.alloc(0);
      const onData = (chunk: Buffer) => {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) {
          if (head.length > MAX_HEAD) { socket.destroy(); fail(new Error('an answer head too long')); }
          return;
        }
        socket.off('data', onData);
        socket.off('error', fail);
        socket.pause();
        const status = /^HTTP\/1\.1 (\d{3})/.exec(head.subarray(0, end).toString('latin1'))?.[1];
        if (status !== '101') {
          socket.destroy();
          const body = head.subarray(end + 4).toString('utf8');
          reject(new ShellbaseError('unavailable', `the worker running the service refused the tunnel (${status ?? 'no status'}): ${body.slice(0, 300)}`, { hint: 'retry shortly' }));
          return;
        }
        const rest = head.subarray(end + 4);
        if (rest.length) socket.unshift(rest);
        resolve(socket);
      };
      socket.on('data', onData);
      socket.once('error', fail);
    });
  }
}

import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';

/**
 * How workers of a cluster vouch for what they pass to each other (cluster/peers.ts implements
 * it); absent in the embedded default, where nothing is passed between processes.
 *
 * A **proof** is the value of the `x-shellbase-forwarded` header: the forwarding worker's id, the
 * time it was made, and an HMAC-SHA256 under the cluster secret over the request's method, Host,
 * path and those two. A worker serves a request marked as forwarded only with a valid proof made
 * within the last `PROOF_VALIDITY_MS` (either way: clocks differ a little); the caller's API key
 * travels with the request and is checked again by the worker that serves it. With mutual TLS
 * (`--tls-client-auth`), the request must also come over a connection whose client certificate
 * chains to the cluster's CA (`--tls-ca`): a stolen secret alone does not pass.
 */
export interface Peers {
  /** The proof for a request this worker passes on. */
  prove(method: string, host: string, path: string): string;
  /** Throws `unauthorized` unless `proof` is valid for the request (from a worker holding the secret, recent). */
  check(proof: string | undefined, method: string, host: string, path: string): void;
  /** With mutual TLS, throws `unauthorized` unless the request came over a connection with a client certificate from the cluster's CA. */
  checkConnection(socket: Socket): void;
  /**
   * A raw TCP tunnel to a service that the worker at `api` runs (its internal tunnel path, with a
   * proof and no API key: this worker checked the caller's right to reach the service already).
   */
  tunnel(api: string, token: string): Promise<Duplex>;
  /** A TCP connection to another worker's URL (TLS when it is https, checked against `tls.ca`). */
  connect(url: URL, onConnect: () => void): Socket;
  /** Options for TLS connections to other workers: the CA their certificates chain to (if not the system's); with mutual TLS, this worker's certificate and key. */
  readonly tls: { ca?: Buffer; cert?: Buffer; key?: Buffer };
}

/** How long a proof stays valid after it was made (and how far ahead of this worker's clock it may be). */
export const PROOF_VALIDITY_MS = 30_000;

/** The header a forwarded request carries its proof in. */
export const FORWARDED = 'x-shellbase-forwarded';

/** The API's internal tunnel to a service by token (workers only: a proof, no key). */
export const internalTunnelPath = (token: string) => `/internal/services/${token}/connect`;

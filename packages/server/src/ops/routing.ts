import type { Caller } from '../core/deps.js';
import type { PortTarget } from '../util/pipe.js';

/**
 * What decides which worker serves an operation:
 * - `context`: a query on a context (with locality on, the context's preferred worker keeps its
 *   layers warm);
 * - `machine`: a call about a machine (only the worker running it has its VM);
 * - `service`: stopping, removing or reading the logs of a service (the worker running it);
 * - `port`: traffic to a service's or a machine's port, reached on a worker's `api` (TCP tunnels,
 *   E2B's guest ports) or its `gateway`.
 */
export type Place =
  | { context: string }
  | { machine: string }
  | { service: { context: string; name: string } }
  | { port: PortTarget; door: 'api' | 'gateway' };

/**
 * Where operations run. `where` answers the address (an API or gateway URL) of the worker that
 * should serve an operation at `place`, or null when it is this one. A front door passes the
 * request it came in as, unchanged, to that address; a request another worker passed here
 * (`passed`) is always served here. Implementations: `HereRouter` (one server: everything runs
 * here) and `ClusterRouter`; both pass test/unit/routing.test.ts.
 */
export interface Router {
  where(place: Place, caller: Caller | null, passed: boolean): Promise<string | null>;
  /** The worker at `address` did not answer: leave it out of choices that have another. */
  unreachable(address: string): void;
}

/** One server: every operation runs here. */
export class HereRouter implements Router {
  async where(): Promise<string | null> { return null; }
  unreachable(): void {}
}

/** Where a context's queries should run: another worker's API URL, or null for here (cluster/locality.ts). */
export interface Locality {
  route(tenantId: string, context: string): string | null;
  /** The worker at `address` did not answer: placement leaves it out for now. */
  unreachable(address: string): void;
}

/** What a cluster's router asks the parts that know where things run. */
export interface Whereabouts {
  /** With locality on (SHELLBASE_LOCALITY): contexts' preferred workers. */
  locality?: Locality;
  /** The API of the live worker running a machine, when that is another one. */
  machineOwner(id: string): Promise<string | null>;
  /** The API of the live worker running a service, when that is another one. */
  serviceOwner(caller: Caller, context: string, name: string): Promise<string | null>;
}

/** A worker of a cluster: an operation goes to the worker that holds what it acts on. */
export class ClusterRouter implements Router {
  constructor(private readonly w: Whereabouts) {}

  async where(place: Place, caller: Caller | null, passed: boolean): Promise<string | null> {
    if (passed) return null;
    if ('context' in place) return caller && this.w.locality ? this.w.locality.route(caller.tenantId, place.context) : null;
    if ('machine' in place) return /^m_[a-z0-9]{1,64}$/.test(place.machine) ? this.w.machineOwner(place.machine) : null;
    if ('service' in place) return caller ? this.w.serviceOwner(caller, place.service.context, place.service.name) : null;
    const there = await place.port.elsewhere?.();
    return there ? there[place.door] : null;
  }

  unreachable(address: string): void { this.w.locality?.unreachable(address); }
}

import type { Caller } from '../core/deps.js';
import { ShellbaseError } from '../errors.js';
import { OPERATIONS, type ArgsOf, type OperationKind, type Parts, type ResultOf } from './operations.js';
import type { Place, Router } from './routing.js';
import type { MachineRow } from '../machines/index.js';
import type { PortTarget } from '../util/pipe.js';

/** The stored machines of every tenant (see `Operations.machineRecords`). */
export interface MachineRecords {
  all(): Promise<MachineRow[]>;
  find(id: string): Promise<MachineRow | null>;
  onTaken(listener: (id: string) => void): void;
}

/**
 * The one place operations are dispatched. Front doors (api/, compat/) authenticate a caller
 * here (`begin`: the tenant behind an API key, with a hold that keeps what the request looks up
 * pinned until the front door releases it), ask where an operation runs (`where`: here, or the
 * address of the worker to pass the request to), and run it (`run`). Durability and quotas are
 * applied inside each operation by the part that owns the data (engine/, machines/).
 */
export class Operations {
  constructor(private readonly parts: Parts, readonly router: Router) {}

  /** The caller an `Authorization` header names (unauthorized without a valid key). */
  begin(authorization: string | undefined): Promise<Caller> { return this.parts.engine.begin(authorization); }

  /** A caller acting for a tenant (for work a front door does on a tenant's behalf without a key: timers, guest traffic). */
  callerFor(tenantId: string): Promise<Caller> { return this.parts.engine.callerFor(tenantId); }

  /** The tenant behind an `Authorization` header, without a hold (the gateway's check of a port that wants a key). */
  authenticate(authorization: string | undefined): ReturnType<Parts['engine']['tenants']['authenticate']> {
    return this.parts.engine.tenants.authenticate(authorization);
  }

  /** The longest time limit the caller's commands may have (its tenant's maximum `timeoutMs`). */
  maxTimeoutMs(caller: Caller): number { return this.parts.machines.io.maxTimeoutMs(caller); }

  /** What a gateway token names: a service, or a machine's exposed port. */
  async portByToken(token: string): Promise<PortTarget | null> {
    return (await this.parts.engine.services.byToken(token)) ?? this.parts.machines.byPortToken(token);
  }

  /** A service by its token (another worker's tunnel to a service this one runs). */
  serviceByToken(token: string): Promise<PortTarget | null> { return this.parts.engine.services.byToken(token); }

  /**
   * Every tenant's stored machines, for a front door's own upkeep (E2B's timeouts): `all`, `find`,
   * and `onTaken`, told when this worker of a cluster takes a machine's lease (a wake or restore).
   */
  get machineRecords(): MachineRecords {
    const m = this.parts.machines;
    return { all: () => m.rows(), find: (id) => m.find(id), onTaken: (listener) => m.onTaken(listener) };
  }

  /** Whether machines can run here, and how (`/healthz`). */
  accel(): ReturnType<Parts['machines']['accel']> { return this.parts.machines.accel(); }

  run<K extends OperationKind>(caller: Caller, kind: K, args: ArgsOf<K>): Promise<ResultOf<K>> {
    const operation = OPERATIONS[kind] as { run(p: Parts, c: Caller, a: ArgsOf<K>): Promise<ResultOf<K>> } | undefined;
    if (!operation) throw new ShellbaseError('internal', `no operation ${String(kind)}`);
    return operation.run(this.parts, caller, args).catch((e: unknown) => {
      // A quota's refusal is an event of the tenant's (`quota.refused`), whichever operation met it.
      const details = e instanceof ShellbaseError && e.code === 'limit_exceeded' ? e.details : undefined;
      const quota = details?.quota;
      if (typeof quota === 'string') {
        const a = args as { context?: unknown; id?: unknown };
        this.parts.events.emit(caller, {
          kind: 'quota.refused', ...(typeof a.context === 'string' ? { context: a.context } : {}), ...(typeof a.id === 'string' && kind.startsWith('machine.') ? { machine: a.id } : {}),
          data: { quota, limit: details?.limit ?? null, operation: kind },
        });
      }
      throw e;
    });
  }

  /** Where what is at `place` is served (`placeOf` names an operation's place): null for here, or a worker's address. */
  where(place: Place, caller: Caller | null, passed: boolean): Promise<string | null> {
    return this.router.where(place, caller, passed);
  }
}

/**
 * The place of an operation one worker of a cluster must serve, from what its request names (a
 * context, a machine id, a service): known before the request's body is read, so the request can
 * be passed on as it came. Null for an operation any worker serves.
 */
export function placeOf(kind: OperationKind, names: { context?: string; id?: string; service?: string }): Place | null {
  const operation = OPERATIONS[kind] as { place?(a: unknown): Place };
  if (!operation.place) return null;
  return operation.place(names);
}

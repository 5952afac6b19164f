import type { ContextNetwork, NetworkConnection, NetworkPolicy } from '@shellbase/protocol';
import { durably, type Caller, type Deps } from './deps.js';
import { checkName, checkRange } from './validate.js';
import { notFound } from '../errors.js';
import type { ContextRow } from '../store/metadata/types.js';
import type { EgressSession } from '../net/egress.js';
import { checkPolicy, checkWithin, effectivePolicy, narrowest, within, describe } from '../net/policy.js';

/**
 * Egress policies of tenants and contexts, what a sandbox gets, and the audit
 * log. A context's policy is kept with it (and forks inherit it); a request's
 * `network` may only narrow its context's, which may only narrow its tenant's.
 */
export class Network {
  constructor(private readonly deps: Deps) {}

  /** The tenant's own policy, else the server's default (SHELLBASE_EGRESS). */
  tenantPolicy(caller: Pick<Caller, 'network'>): NetworkPolicy {
    return caller.network ?? this.deps.config.egress.default;
  }

  /**
   * What a sandbox of the context gets for a request asking `request` (validated: 400 malformed,
   * 403 wider). Without a context (a machine of an image), the tenant's policy is the outer one.
   */
  async effective(caller: Caller, context: string | undefined, request?: unknown, read?: ContextRow): Promise<NetworkPolicy> {
    // `read`: the context's row when the caller has just read it.
    const row = context === undefined ? null : read ?? await this.deps.metadata.contexts.get(caller.tenantId, context);
    return effectivePolicy(this.tenantPolicy(caller), row?.network ?? null, request === undefined ? null : checkPolicy(request));
  }

  /**
   * The same for a stored run without a caller (a service waking): the
   * tenant's policy read from the store, and the run's own narrowing cut down
   * to what its context allows now (either may have narrowed since).
   */
  async effectiveOf(tenantId: string, context: string | undefined, stored?: NetworkPolicy): Promise<NetworkPolicy> {
    const [tenant, row] = await Promise.all([
      this.deps.metadata.tenants.get(tenantId), context === undefined ? null : this.deps.metadata.contexts.get(tenantId, context),
    ]);
    // A run of a context deleted since (a machine outlives its context) gets nothing: its policy is gone, not widened.
    if (context !== undefined && !row) return { egress: 'none' };
    const outer = effectivePolicy(this.tenantPolicy({ network: tenant?.network }), row?.network ?? null);
    return stored ? narrowest(stored, outer) : outer;
  }

  async get(caller: Caller, name: string): Promise<ContextNetwork> {
    checkName(name);
    const row = await this.deps.metadata.contexts.get(caller.tenantId, name);
    if (!row) throw notFound('context', name);
    return { policy: row.network ?? null, effective: effectivePolicy(this.tenantPolicy(caller), row.network ?? null) };
  }

  /** Sets a context's own policy (within the tenant's), or drops it with null. */
  set(caller: Caller, name: string, raw: unknown): Promise<ContextNetwork> {
    return durably(this.deps.durability, async () => {
      checkName(name);
      const policy = raw === null ? null : checkPolicy(raw);
      if (policy) checkWithin(policy, this.tenantPolicy(caller));
      if (!(await this.deps.metadata.contexts.setNetwork(caller.tenantId, name, policy))) throw notFound('context', name);
      return this.get(caller, name);
    });
  }

  async log(caller: Caller, name: string, limit = 100): Promise<NetworkConnection[]> {
    checkName(name);
    checkRange('limit', limit, 1, 10_000);
    if (!(await this.deps.metadata.contexts.get(caller.tenantId, name))) throw notFound('context', name);
    await this.deps.egress.flush();
    return this.deps.metadata.egressLog.recent(caller.tenantId, name, limit);
  }

  /**
   * A proxy session for one sandbox; null for `none` (which then costs nothing). `owner`: the
   * host uid that connects to its socket (default: the sandboxes' root; a machine's QEMU's).
   */
  async open(tenantId: string, context: string, kind: NetworkConnection['kind'], policy: NetworkPolicy, owner?: number): Promise<EgressSession | null> {
    if (policy.egress === 'none') return null;
    return this.deps.egress.open({ tenantId, context, kind, policy }, owner);
  }
}

/** A request's network in an error's words. */
export const policyText = describe;
export { within };

import type { NetworkPolicy } from '@shellbase/protocol';

/** The egress enforcement point's settings (config.ts reads them from SHELLBASE_EGRESS*). */
export interface EgressConfig {
  /** The policy of tenants that have none of their own (SHELLBASE_EGRESS: none, public, or allow:a.com,*.b.com). */
  default: NetworkPolicy;
  /** Private ranges the admin lets sandboxes reach (SHELLBASE_EGRESS_ALLOW_CIDRS, comma-separated). */
  allowCidrs: string[];
  /** Names the proxy resolves to given addresses before asking DNS (SHELLBASE_EGRESS_HOSTS: name=address,…; tests and split-horizon setups). */
  hosts: Record<string, string>;
  /** Connections open at once through the proxy, per sandbox and per tenant. */
  maxPerSandbox: number;
  maxPerTenant: number;
  /** Days the egress audit log keeps a connection (SHELLBASE_EGRESS_LOG_DAYS; garbage collection trims it). */
  logDays: number;
}

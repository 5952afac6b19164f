import { createHash } from 'node:crypto';
import type { ServiceShare } from '@shellbase/protocol';
import { invalid } from '../../errors.js';
import type { MetadataStore, ServiceRow } from '../../store/metadata/types.js';
import { checkName } from '../../core/validate.js';

/** The name a service answers at from the contexts it is shared with (and its own). */
export const linkName = (row: Pick<ServiceRow, 'name' | 'context'>) => `${row.name}.${row.context}.internal`;

const MAX_SHARE = 256;

/** `"tenant"` or a list of context names; refused when malformed. */
export function checkShare(raw: unknown): ServiceShare {
  if (raw === 'tenant') return 'tenant';
  if (!Array.isArray(raw) || raw.length === 0 || raw.length > MAX_SHARE) {
    throw invalid('share must be "tenant" or a non-empty list of context names', `pass share: "tenant", or share: ["api", "jobs"] (at most ${MAX_SHARE})`);
  }
  return [...new Set(raw.map((c) => { checkName(c as string); return c as string; }))].sort();
}

const sharesWith = (row: ServiceRow, context: string) =>
  row.context !== context && (row.spec.share === 'tenant' || (Array.isArray(row.spec.share) && row.spec.share.includes(context)));

/**
 * Which services of other contexts a context reaches by name: those of its
 * tenant shared with it (`share: "tenant"`, or a list naming it). Read from
 * the store per tenant and kept until the tenant's services change.
 */
export class ServiceLinks {
  private readonly shared = new Map<string, Promise<ServiceRow[]>>();

  constructor(private readonly md: MetadataStore) {}

  /** The tenant's services changed (created, shared, deleted): read them again next time. */
  invalidate(tenantId: string): void {
    this.shared.delete(tenantId);
  }

  private sharedOf(tenantId: string): Promise<ServiceRow[]> {
    let p = this.shared.get(tenantId);
    if (!p) {
      p = this.md.services.shared(tenantId);
      p.catch(() => this.shared.delete(tenantId));
      this.shared.set(tenantId, p);
    }
    return p;
  }

  /** Services of other contexts that `context`'s sandboxes reach. */
  async linksOf(tenantId: string, context: string): Promise<ServiceRow[]> {
    return (await this.sharedOf(tenantId)).filter((row) => sharesWith(row, context));
  }

  /**
   * The service `host` (`{service}.{context}.internal`) names, if `context`
   * may reach it on `port`; else why not, naming the service and saying
   * nothing of other tenants (whose services are simply not found).
   */
  async resolve(tenantId: string, context: string, host: string, port: number, own: ServiceRow[]): Promise<ServiceRow> {
    const name = host.toLowerCase();
    const row = [...own, ...(await this.linksOf(tenantId, context))].find((r) => linkName(r).toLowerCase() === name);
    if (!row) {
      // Same tenant, not shared with this context: say so. Anything else: no such service.
      const labels = name.replace(/\.internal$/, '').split('.');
      for (let i = 1; i < labels.length; i++) {
        const there = await this.md.services.get(tenantId, labels.slice(i).join('.'), labels.slice(0, i).join('.'));
        if (there) throw new Error(`service ${there.name} of context ${there.context} is not shared with context ${context}`);
      }
      throw new Error(`no service ${host} (services answer at SERVICE.CONTEXT.internal to the contexts they are shared with)`);
    }
    if (row.spec.port !== port) throw new Error(`service ${row.name} of context ${row.context} listens on port ${row.spec.port}, not ${port}`);
    return row;
  }
}

/**
 * Loopback addresses for a sandbox's links, one per service, stable for a
 * service (a hash into 127.64.0.0/10) and distinct within the set.
 */
export function linkAddresses(rows: ServiceRow[]): Map<string, string> {
  const taken = new Set<number>();
  const out = new Map<string, string>();
  for (const row of rows) {
    let n = createHash('sha256').update(`${row.tenantId}/${row.context}/${row.name}`).digest().readUInt32BE(0) & 0x3fffff;
    while (taken.has(n) || (n & 0xff) === 0 || (n & 0xff) === 0xff) n = (n + 1) & 0x3fffff;
    taken.add(n);
    out.set(row.token, `127.${64 + (n >> 16)}.${(n >> 8) & 0xff}.${n & 0xff}`);
  }
  return out;
}

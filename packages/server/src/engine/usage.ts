import type { UsageItem } from '@shellbase/protocol';
import { ShellbaseError, invalid, notFound } from '../errors.js';
import type { MetadataStore, UsageGrouping } from '../store/metadata/types.js';
import type { Caller } from '../core/deps.js';

export interface UsageQuery {
  from?: string;
  to?: string;
  groupBy?: UsageGrouping;
  /** Admin only: another tenant's usage, by name. */
  tenant?: string;
}

function time(value: string | undefined, fallback: string, field: string): string {
  if (value === undefined) return fallback;
  const t = Date.parse(value);
  if (Number.isNaN(t)) throw invalid(`${field} is not a date`, `pass an ISO 8601 time such as ${new Date().toISOString()}`);
  return new Date(t).toISOString();
}

/**
 * The usage ledger read back: what a tenant's queries cost over a time range,
 * and what its versions store. Idle contexts add nothing but stored bytes.
 */
export class Usage {
  /** `machineBytes`: what a tenant's machines hold on disk (their disks, snapshots, hibernated memory). */
  constructor(private readonly md: MetadataStore, private readonly machineBytes: (tenantId: string) => Promise<number> = async () => 0) {}

  async summary(caller: Caller, q: UsageQuery): Promise<{ items: UsageItem[]; total: UsageItem }> {
    let tenantId = caller.tenantId;
    if (q.tenant !== undefined) {
      if (!caller.admin) throw new ShellbaseError('forbidden', 'only the admin key reads another tenant\'s usage', { hint: 'drop tenant=' });
      const t = await this.md.tenants.byName(q.tenant);
      if (!t) throw notFound('tenant', q.tenant);
      tenantId = t.id;
    }
    const from = time(q.from, '1970-01-01T00:00:00.000Z', 'from');
    const to = time(q.to, '9999-12-31T00:00:00.000Z', 'to');
    const groupBy = q.groupBy ?? 'context';
    const rows = await this.md.usage.totals(tenantId, from, to, groupBy);
    const items: UsageItem[] = [];
    for (const r of rows) {
      let bytesStored = 0;
      if (groupBy === 'context') {
        const ctx = await this.md.contexts.get(tenantId, r.key);
        const head = ctx && (await this.md.versions.get(ctx.head));
        if (head) bytesStored = await this.md.versions.layerBytes(head.layers);
      }
      items.push({ key: r.key, queries: r.queries, cpuMs: r.cpuMs, wallMs: r.wallMs, serviceSeconds: r.serviceSeconds, machineSeconds: r.machineSeconds, machineMbSeconds: r.machineMbSeconds,
        serviceActiveSeconds: r.serviceActiveSeconds, machineActiveSeconds: r.machineActiveSeconds, egressBytes: r.egressBytes, ingressBytes: r.ingressBytes, bytesStored });
    }
    const total: UsageItem = {
      key: 'total',
      queries: items.reduce((s, i) => s + i.queries, 0),
      cpuMs: items.reduce((s, i) => s + i.cpuMs, 0),
      wallMs: items.reduce((s, i) => s + i.wallMs, 0),
      serviceSeconds: items.reduce((s, i) => s + i.serviceSeconds, 0),
      machineSeconds: items.reduce((s, i) => s + i.machineSeconds, 0),
      machineMbSeconds: items.reduce((s, i) => s + i.machineMbSeconds, 0),
      serviceActiveSeconds: items.reduce((s, i) => s + i.serviceActiveSeconds, 0),
      machineActiveSeconds: items.reduce((s, i) => s + i.machineActiveSeconds, 0),
      egressBytes: items.reduce((s, i) => s + i.egressBytes, 0),
      ingressBytes: items.reduce((s, i) => s + i.ingressBytes, 0),
      bytesStored: await this.md.tenants.storedBytes(tenantId) + await this.machineBytes(tenantId),
    };
    return { items, total };
  }
}

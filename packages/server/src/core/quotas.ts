import { TIMEOUT_CEILING_MS, formatDuration } from '@shellbase/protocol';
import type { Limits, ServerConfig } from '../config.js';
import { ShellbaseError, invalid } from '../errors.js';
import type { MetadataStore, TenantQuotas } from '../store/metadata/types.js';
import type { Caller } from './deps.js';

const LIMIT_KEYS = ['memoryMb', 'pids', 'cpus', 'diskMb', 'outputBytes', 'timeoutMs'] as const;
/** History settings garbage collection reads (gc.ts); retentionDays may be 0. */
const HISTORY_KEYS = ['retentionDays', 'keepVersions'] as const;
const KEYS = ['contexts', 'storedBytes', 'concurrentQueries', 'runningServices', 'runningMachines', 'tenantCpus', ...LIMIT_KEYS, ...HISTORY_KEYS] as const;

/** A tenant's quotas: its own where set, the server's otherwise. */
export interface Quotas {
  contexts: number;
  storedBytes: number;
  concurrentQueries: number;
  runningServices: number;
  /** Machines running, paused or starting at once (hibernated and stopped ones do not count). */
  runningMachines: number;
  /** Cores all the tenant's sandboxes may use together. */
  tenantCpus: number;
  /**
   * The most one query may ask for: never above the server's maximums, except `timeoutMs`, which
   * the tenant's own quota sets (above or below the server's, at most TIMEOUT_CEILING_MS).
   */
  maximums: Limits;
}

export function quotasOf(config: ServerConfig, caller: Pick<Caller, 'quotas'>): Quotas {
  const own = caller.quotas ?? {};
  const maximums = { ...config.maximums };
  for (const k of LIMIT_KEYS) if (own[k] !== undefined) maximums[k] = Math.min(maximums[k], own[k]!);
  if (own.timeoutMs !== undefined) maximums.timeoutMs = Math.min(own.timeoutMs, TIMEOUT_CEILING_MS);
  return {
    contexts: own.contexts ?? config.quotas.contexts,
    storedBytes: own.storedBytes ?? config.quotas.storedBytes,
    concurrentQueries: own.concurrentQueries ?? config.quotas.concurrentQueries,
    runningServices: own.runningServices ?? config.quotas.runningServices,
    runningMachines: own.runningMachines ?? config.quotas.runningMachines,
    tenantCpus: own.tenantCpus ?? config.quotas.tenantCpus,
    maximums,
  };
}

/** Validates quotas given when a tenant is made. */
export function checkQuotas(q: Record<string, unknown>, config: ServerConfig): TenantQuotas {
  const out: TenantQuotas = {};
  for (const [k, v] of Object.entries(q)) {
    if (!(KEYS as readonly string[]).includes(k)) throw invalid(`unknown quota ${JSON.stringify(k)}`, `quotas are: ${KEYS.join(', ')}`);
    if (k === 'retentionDays') {
      if (typeof v !== 'number' || !(v >= 0)) throw invalid('retentionDays must be a number ≥ 0', 'pass quotas.retentionDays ≥ 0');
    } else if (typeof v !== 'number' || !(v > 0)) {
      throw invalid(`quota ${k} must be a positive number`, `pass quotas.${k} > 0`);
    }
    if (k === 'timeoutMs') {
      // A tenant's time limit may be above the server's default maximum, up to the ceiling.
      if (!Number.isInteger(v)) throw invalid(`quota timeoutMs = ${v} is not a whole number of milliseconds`, 'pass quotas.timeoutMs in whole milliseconds', { field: 'quotas.timeoutMs', value: v });
      if (v > TIMEOUT_CEILING_MS) {
        throw invalid(`quota timeoutMs = ${v} is above the most a tenant may be allowed (${TIMEOUT_CEILING_MS} ms, ${formatDuration(TIMEOUT_CEILING_MS)})`,
          `pass quotas.timeoutMs ≤ ${TIMEOUT_CEILING_MS}`, { field: 'quotas.timeoutMs', value: v, max: TIMEOUT_CEILING_MS });
      }
    } else {
      const max = (config.maximums as unknown as Record<string, number>)[k];
      if (max !== undefined && v > max) throw invalid(`quota ${k} = ${v} is above the server's maximum`, `pass quotas.${k} ≤ ${max}`, { field: `quotas.${k}`, value: v, max });
    }
    (out as Record<string, number>)[k] = v;
  }
  return out;
}

export function overQuota(quota: string, limit: number, hint: string): ShellbaseError {
  return new ShellbaseError('limit_exceeded', `quota ${quota} (${limit}) reached`, { details: { quota, limit }, hint });
}

/** Refuses new writes once a tenant stores its quota (only counted when the quota is finite). */
export async function checkStoredBytes(md: MetadataStore, tenantId: string, quotas: Quotas): Promise<void> {
  if (!Number.isFinite(quotas.storedBytes)) return;
  if ((await md.tenants.storedBytes(tenantId)) >= quotas.storedBytes) {
    throw overQuota('storedBytes', quotas.storedBytes, 'delete or reset contexts to free what only they hold, or ask the admin for a higher quota');
  }
}

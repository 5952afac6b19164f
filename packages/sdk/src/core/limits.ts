import { TIMEOUT_CEILING_MS, formatDuration, type LimitHit } from '@shellbase/protocol';

/**
 * Why a command that met a limit ended, and how to give it more: the limit, its value, the
 * option that sets it (`option`: `timeoutMs` in the SDK, `--timeout` on the command line) and
 * the most the tenant may ask for. `limit` absent (a server that does not name it): what is known.
 */
export function limitMessage(limit: LimitHit | undefined, option = 'timeoutMs'): string {
  if (!limit) return `the command timed out; pass ${option} to give it longer`;
  const ran = `the command timed out after ${formatDuration(limit.value)} (timeoutMs = ${limit.value})`;
  if (limit.value < limit.max) {
    return `${ran}; pass ${option} up to ${formatDuration(limit.max)} (${limit.max} ms, this tenant's maximum) to give it longer`;
  }
  if (limit.max < TIMEOUT_CEILING_MS) {
    return `${ran}, this tenant's maximum; an admin may raise the tenant's quotas.timeoutMs up to ${formatDuration(TIMEOUT_CEILING_MS)} (${TIMEOUT_CEILING_MS} ms)`;
  }
  return `${ran}, the most any tenant may ask for`;
}

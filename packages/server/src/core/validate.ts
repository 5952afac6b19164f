import { TIMEOUT_CEILING_MS, formatDuration, type ExecLimits } from '@shellbase/protocol';
import type { Limits } from '../config.js';
import { invalid } from '../errors.js';

const NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

/** Context names: 1-128 characters of [A-Za-z0-9._-], not starting with a dot. */
export function checkName(name: string, what = 'context'): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw invalid(`invalid ${what} name ${JSON.stringify(name)}`,
      'names are 1-128 characters of A-Z a-z 0-9 . _ - and do not start with "."', { name });
  }
  return name;
}

const LIMIT_KEYS = ['memoryMb', 'pids', 'cpus', 'diskMb', 'outputBytes'] as const;

/** Fills a request's limits from the defaults and refuses any above `max` (the tenant's maximums). */
export function resolveLimits(asked: ExecLimits | undefined, timeoutMs: number | undefined, defaults: Limits, max: Limits): Limits {
  const out: Limits = { ...defaults };
  // A tenant's ceilings may be below the server's defaults.
  for (const k of Object.keys(out) as (keyof Limits)[]) out[k] = Math.min(out[k], max[k]);
  for (const key of LIMIT_KEYS) {
    const v = asked?.[key];
    if (v === undefined) continue;
    const min = key === 'cpus' ? 0.01 : key === 'memoryMb' ? 16 : key === 'diskMb' ? 1 : key === 'pids' ? 8 : 0;
    if (!Number.isFinite(v) || v < min || v > max[key] || (key !== 'cpus' && !Number.isInteger(v))) {
      throw invalid(`limits.${key} = ${v} is out of range`, `pass limits.${key} between ${min} and ${max[key]}`,
        { field: `limits.${key}`, min, max: max[key] });
    }
    out[key] = v;
  }
  if (timeoutMs !== undefined) out.timeoutMs = checkTimeout('timeoutMs', timeoutMs, max.timeoutMs);
  return out;
}

/**
 * A time limit in milliseconds: a whole number from `min` to `max` (the tenant's maximum
 * `timeoutMs`), or a 400 that names the field, the value and that maximum (details: field, value, min, max).
 */
export function checkTimeout(field: string, v: number, max: number, min = 1): number {
  if (Number.isInteger(v) && v >= min && v <= max) return v;
  const details = { field, value: v, min, max };
  if (!Number.isInteger(v) || v < min) throw invalid(`${field} = ${v} is out of range`, `pass ${field} between ${min} and ${max} (milliseconds)`, details);
  const raise = raiseAdvice(max);
  throw invalid(`${field} = ${v} (${formatDuration(v)}) is above this tenant's maximum of ${max} ms (${formatDuration(max)})`,
    `pass ${field} between ${min} and ${max}${raise}`, details);
}

/** What an admin may do about a tenant's maximum `timeoutMs` of `max` (nothing past the ceiling), as a clause to append. */
export function raiseAdvice(max: number): string {
  return max < TIMEOUT_CEILING_MS
    ? `; an admin may raise the tenant's quotas.timeoutMs up to ${TIMEOUT_CEILING_MS} (${formatDuration(TIMEOUT_CEILING_MS)})` : '';
}

/** A cwd inside the sandbox: absolute, no NUL, no `..` segments. */
export function checkCwd(cwd: string): string {
  if (!cwd.startsWith('/') || cwd.includes('\0') || cwd.split('/').includes('..') || cwd.length > 4096) {
    throw invalid(`invalid cwd ${JSON.stringify(cwd)}`, 'pass an absolute path such as /root');
  }
  return cwd;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function checkEnv(env: Record<string, string> | undefined): Record<string, string> {
  for (const [k, v] of Object.entries(env ?? {})) {
    if (!ENV_NAME.test(k) || typeof v !== 'string' || v.includes('\0')) {
      throw invalid(`invalid environment variable ${JSON.stringify(k)}`, 'names match [A-Za-z_][A-Za-z0-9_]*; values are strings without NUL');
    }
  }
  return env ?? {};
}

/** An integer setting between `min` and `max`, or a 400 that names the field and the range. */
export function checkRange(field: string, v: number, min: number, max: number): number {
  if (!Number.isInteger(v) || v < min || v > max) throw invalid(`${field} = ${v} is out of range`, `pass ${field} between ${min} and ${max}`);
  return v;
}

/**
 * What a query or a machine's exec runs: `command` with bash -c, or `argv` as given; never both,
 * never empty, and without NUL bytes (the spawner's frames end each argument at one).
 */
export function checkCommand(req: { command?: string; argv?: string[] }): string[] {
  if (req.command !== undefined && req.argv !== undefined) throw invalid('pass either command or argv, not both', 'command runs as bash -c COMMAND; argv runs as given');
  let argv: string[] | undefined;
  if (typeof req.command === 'string' && req.command.length > 0) argv = ['bash', '-c', req.command];
  else if (Array.isArray(req.argv) && req.argv.length > 0 && req.argv.every((a) => typeof a === 'string')) argv = req.argv;
  if (!argv) throw invalid('nothing to run', 'pass command (run by bash -c) or argv (a non-empty array of strings)');
  if (argv.some((a) => a.includes('\0'))) throw invalid('the command holds a NUL byte', 'remove NUL bytes from command or argv');
  return argv;
}

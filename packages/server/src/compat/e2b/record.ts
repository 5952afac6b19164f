import { randomBytes } from 'node:crypto';
import { invalid } from '../../errors.js';
import type { MachineRow } from '../../machines/index.js';

/** The name compat/e2b's record has among a machine's extensions. */
const NAME = 'e2b';

/** An E2B sandbox's own fields, persisted with its machine (`spec.extensions.e2b`). */
export interface E2bSandboxSpec {
  format: 1;
  /** The template id it was created from, as the caller named it. */
  templateId: string;
  metadata: Record<string, string>;
  /** Environment of every process started through envd (a request's own env over it). */
  envs: Record<string, string>;
  startedAt: string;
  /** When its timeout runs out (ISO time); a paused sandbox keeps it but nothing happens then. */
  endAt: string;
  /** What the end of its timeout does: delete it, or pause it (hibernate, memory kept unless `keepMemory` is false). */
  onTimeout: 'kill' | 'pause';
  /** False: a pause at its timeout drops its memory (onTimeout's `keepMemory`); absent: it keeps it. */
  keepMemory?: false;
  /** Envd traffic resumes it when paused. */
  autoResume: boolean;
  /** Paused through the E2B API (its machine hibernated): envd traffic does not wake it unless autoResume. */
  paused: boolean;
  /** Paused without its memory (its machine powered off, its disk kept): its resume boots it. */
  pausedWithoutMemory?: true;
  /** Sent by the SDK as X-Access-Token on envd traffic. */
  accessToken: string;
  /** Required on traffic to its ports (header e2b-traffic-access-token) when set: allowPublicTraffic was false. */
  trafficToken?: string;
}

/**
 * The E2B record a machine's row carries, or undefined: a machine the E2B API did not make, or
 * whose record is of a format this server does not read (a newer server's: not a sandbox here).
 */
export function e2bOf(row: MachineRow): E2bSandboxSpec | undefined {
  const r = row.spec.extensions?.[NAME] as E2bSandboxSpec | undefined;
  return r?.format === 1 ? r : undefined;
}

/** `record` as the machine's extensions take it. */
export const asExtension = (record: E2bSandboxSpec): Record<string, unknown> => ({ [NAME]: record });

export const E2B_EXTENSION = NAME;

/** The longest timeout a sandbox may have (seconds): a week, like a machine's idle timeout. */
export const MAX_TIMEOUT_S = 7 * 86_400;

/** A timeout in seconds from a request (absent: `fallback`). */
export function timeoutSeconds(v: unknown, fallback: number): number {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > MAX_TIMEOUT_S) {
    throw invalid(`timeout must be a whole number of seconds from 1 to ${MAX_TIMEOUT_S}`, `pass timeoutMs ≤ ${MAX_TIMEOUT_S * 1000}`);
  }
  return v;
}

const token = () => randomBytes(24).toString('hex');

/** What a new sandbox's record is made of (create and fork). */
export interface RecordOptions {
  metadata: Record<string, string>;
  envs: Record<string, string>;
  timeoutS: number;
  onTimeout: 'kill' | 'pause';
  keepMemory?: boolean;
  autoResume: boolean;
  publicTraffic: boolean;
}

/** A new sandbox's record, started now: its timeout from now, new tokens, not paused. */
export function newRecord(o: RecordOptions, templateId: string): E2bSandboxSpec {
  const now = Date.now();
  return {
    format: 1, templateId, metadata: o.metadata, envs: o.envs, startedAt: new Date(now).toISOString(),
    endAt: new Date(now + o.timeoutS * 1000).toISOString(), onTimeout: o.onTimeout, ...(o.keepMemory === false ? { keepMemory: false } : {}),
    autoResume: o.autoResume, paused: false, accessToken: token(), ...(o.publicTraffic ? {} : { trafficToken: token() }),
  };
}

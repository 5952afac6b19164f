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
  /** What the end of its timeout does: delete it, or pause it (hibernate, memory kept). */
  onTimeout: 'kill' | 'pause';
  /** Envd traffic resumes it when paused. */
  autoResume: boolean;
  /** Paused through the E2B API (its machine hibernated): envd traffic does not wake it unless autoResume. */
  paused: boolean;
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

/**
 * The protocol's constants: the members of its state and kind unions (schemas/ builds enums of
 * them, types.ts names their unions) and its fixed limits. Nothing here loads TypeBox.
 */

/** What made a version. */
export const VERSION_CAUSE_KINDS = ['exec', 'write', 'merge', 'reset', 'image', 'service', 'machine', 'build'] as const;

/**
 * The most any tenant's `timeoutMs` may be (24 h): a query's, a machine exec's, a service's
 * `startTimeoutMs` and an E2B command's. Each tenant's own maximum (its `quotas.timeoutMs`, else
 * the server's `SHELLBASE_MAX_TIMEOUT_MS`, 1 h by default) is at most this.
 */
export const TIMEOUT_CEILING_MS = 86_400_000;

/** Contexts one query may mount (ExecRequest.mounts). */
export const MAX_MOUNTS = 16;

export const FILE_TYPES = ['file', 'dir', 'symlink', 'other'] as const;

export const DIFF_KINDS = ['added', 'modified', 'deleted'] as const;

/** A service's states (engine/services/lifecycle.ts has its transitions). */
export const SERVICE_STATES = ['sleeping', 'starting', 'running', 'stopping'] as const;

export const SERVICE_ACCESS = ['url', 'key'] as const;

/**
 * A machine's states (machines/lifecycle.ts has its transitions). `lost`: in a cluster, the worker
 * running it died with its memory (its snapshots still restore).
 */
export const MACHINE_STATES = ['starting', 'running', 'paused', 'hibernated', 'stopped', 'lost'] as const;

/** The largest `tail` of `GET /v1/machines/{id}/console`, and how far back it reads. */
export const MACHINE_CONSOLE_MAX_LINES = 10_000;
export const MACHINE_CONSOLE_MAX_BYTES = 1 << 20;

/**
 * The WebSocket subprotocols of `GET /v1/machines/{id}/pty`: the client offers `PTY_PROTOCOL`,
 * and (browsers cannot set `Authorization` on a WebSocket) its API key as
 * `PTY_KEY_PREFIX + base64url(key)`; the server answers with `PTY_PROTOCOL` only.
 */
export const PTY_PROTOCOL = 'shellbase-pty';
export const PTY_KEY_PREFIX = 'shellbase-key.';

/** The longest cell of code `POST /v1/machines/{id}/code` takes, in characters. */
export const CODE_MAX_CHARS = 10 << 20;

/** What an event may say happened (`GET /v1/events`, webhooks). */
export const EVENT_KINDS = ['version.committed', 'service.woke', 'service.slept', 'service.failed', 'machine.state', 'quota.refused', 'sandbox.lifecycle'] as const;

import { Type } from 'typebox';
import { MAX_MOUNTS } from '../constants.js';
import { EnvSchema, ErrorEventSchema, LimitHitSchema, NetworkPolicyInSchema, OutputEventSchema, TimeoutMsSchema, VersionIdSchema, strict } from './common.js';

/** Queries: `POST /v1/contexts/{name}/exec`, its result, and the lines of its NDJSON stream. */

export const ExecLimitsSchema = Type.Object({
  memoryMb: Type.Optional(Type.Number()), pids: Type.Optional(Type.Number()), cpus: Type.Optional(Type.Number()),
  diskMb: Type.Optional(Type.Number()), outputBytes: Type.Optional(Type.Number()),
}, strict);

export const CommitModeSchema = Type.Union([Type.Literal('always'), Type.Literal('on-success'), Type.Literal('never')], { title: 'CommitMode' });

export const OnConflictSchema = Type.Union([Type.Literal('fail'), Type.Literal('retry')], { title: 'OnConflict' });

/** Another context of the tenant shown to a query at `path` (docs/api.md, Mounts). */
export const MountSchema = Type.Object({
  context: Type.String({ minLength: 1, maxLength: 128 }),
  /** Absolute, normalized, not `/` and not below /proc, /dev, /sys or /tmp; no two mounts nest. */
  path: Type.String({ minLength: 2, maxLength: 4096 }),
  /** The version it shows (default: its head when the query starts). */
  version: Type.Optional(VersionIdSchema),
  /** Writes under a writable mount commit into its context, atomically with the query's own commit. */
  readOnly: Type.Optional(Type.Boolean()),
}, { ...strict, $id: 'Mount', title: 'Mount' });

export const ExecRequestSchema = Type.Object({
  command: Type.Optional(Type.String({ maxLength: 1 << 20 })),
  argv: Type.Optional(Type.Array(Type.String(), { minItems: 1, maxItems: 4096 })),
  stdin: Type.Optional(Type.String()),
  env: Type.Optional(EnvSchema),
  cwd: Type.Optional(Type.String({ maxLength: 4096 })),
  /** Who runs it (default: the context's default user, else root); see ContextDefaults. */
  user: Type.Optional(Type.String({ maxLength: 129 })),
  version: Type.Optional(VersionIdSchema),
  commit: Type.Optional(CommitModeSchema),
  onConflict: Type.Optional(OnConflictSchema),
  /** Milliseconds before the command is killed (default 60 s; at most the tenant's maximum, 1 h unless the admin set another, never above TIMEOUT_CEILING_MS). */
  timeoutMs: Type.Optional(TimeoutMsSchema),
  limits: Type.Optional(ExecLimitsSchema),
  /** Narrows the context's egress policy for this query (docs/api.md, Network). */
  network: Type.Optional(NetworkPolicyInSchema),
  /** Contexts mounted into the sandbox (at most MAX_MOUNTS). */
  mounts: Type.Optional(Type.Array(MountSchema, { maxItems: MAX_MOUNTS })),
}, strict);

export const ExecUsageSchema = Type.Object({
  cpuMs: Type.Number(), wallMs: Type.Number(), memoryPeakBytes: Type.Number(), bytesWritten: Type.Number(),
  /** Bytes the query sent and received through the egress proxy (present when it had egress). */
  egressBytes: Type.Optional(Type.Number()),
  ingressBytes: Type.Optional(Type.Number()),
}, { title: 'ExecUsage' });

export const ConflictSchema = Type.Object({ paths: Type.Array(Type.String()), version: Type.String() }, {
  title: 'Conflict', description: "The query's changes overlapped changes committed meanwhile; `version` holds its work, unattached.",
});

/** What became of a mount: the version it showed, and its context's head after the query. */
export const MountResultSchema = Type.Object({
  context: Type.String(),
  path: Type.String(),
  readOnly: Type.Boolean(),
  /** The version the query saw there. */
  baseVersion: Type.String(),
  /** The version its writes became (its context's new head when committed), else `baseVersion`. */
  version: Type.String(),
  committed: Type.Boolean(),
  /** Its writes overlapped changes committed to its context meanwhile (nothing of the query was committed). */
  conflict: Type.Optional(ConflictSchema),
}, { title: 'MountResult' });

export const ExecResultSchema = Type.Object({
  exitCode: Type.Integer(),
  signal: Type.Optional(Type.String()),
  timedOut: Type.Boolean(),
  oomKilled: Type.Boolean(),
  /** True when the disk limit (`limits.diskMb`) stopped a write. */
  diskLimitHit: Type.Optional(Type.Boolean()),
  stdout: Type.String(),
  stderr: Type.String(),
  truncated: Type.Boolean(),
  baseVersion: Type.String(),
  version: Type.String(),
  committed: Type.Boolean(),
  /** Set when the query's changes overlapped changes committed meanwhile. */
  conflict: Type.Optional(ConflictSchema),
  /** How many times `onConflict: "retry"` ran the command again. */
  retries: Type.Optional(Type.Integer()),
  /** Set when a limit ended the command (with `timedOut`: its `timeoutMs`). */
  limit: Type.Optional(LimitHitSchema),
  usage: ExecUsageSchema,
  /** One per mount, in the order asked for. */
  mounts: Type.Optional(Type.Array(MountResultSchema)),
}, { $id: 'ExecResult', title: 'ExecResult', description: 'The result of a query once it ended.' });

/** How a query ended: its result without the output (a stream sent that as it happened). */
export const ExecExitSchema = Type.Omit(ExecResultSchema, ['stdout', 'stderr']);

/** One line of the NDJSON stream of a query. */
export const ExecEventSchema = Type.Union([
  OutputEventSchema,
  Type.Interface([ExecExitSchema], { type: Type.Literal('exit') }),
  ErrorEventSchema,
]);

import { Type } from 'typebox';
import { MACHINE_CONSOLE_MAX_LINES, MACHINE_STATES, MAX_MOUNTS } from '../constants.js';
import { EnvSchema, ErrorEventSchema, LimitHitSchema, NetworkPolicyInSchema, NetworkPolicySchema, OutputEventSchema, TimeoutMsSchema, oneOf, strict } from './common.js';
import { ExecLimitsSchema, MountSchema } from './exec.js';
import { ServiceAccessSchema } from './services.js';

/** Machines (microVMs), their snapshots, exec, console and PTY. */

export const MachineStateSchema = oneOf(MACHINE_STATES, { title: 'MachineState' });

export const MachinePortSchema = Type.Object({
  port: Type.Integer(),
  /** The gateway URL (its host label is an unguessable token). */
  url: Type.String(),
  pathUrl: Type.String(),
  /** `key`: the gateway also wants the tenant's API key (as a service's `access`). */
  access: ServiceAccessSchema,
}, { title: 'MachinePort' });

export const MachineSchema = Type.Object({
  id: Type.String(),
  state: MachineStateSchema,
  /** The context (and version) its disk was made from; absent for a machine of a bare image. */
  context: Type.Optional(Type.String()), version: Type.Optional(Type.String()), image: Type.String(),
  memoryMb: Type.Integer(), cpus: Type.Integer(),
  /** Its disk's size as the guest sees it (GiB); its root file system fills it. Grows with `POST /v1/machines/{id}/disk`. */
  diskGb: Type.Integer(),
  /** Its own narrowing of its context's (or tenant's) egress policy, if it was made with one; forks keep it. */
  network: Type.Optional(NetworkPolicySchema),
  /** Hibernates after this long without exec, file calls or requests to its ports. */
  idleTimeoutMs: Type.Integer(),
  /** The snapshot it was restored from, when it was (forks and restores). */
  snapshot: Type.Optional(Type.String()),
  ports: Type.Array(MachinePortSchema),
  /** Contexts copied into it at a path: `version` is the one its copy holds (its last commit there, or the one it was made with). */
  mounts: Type.Optional(Type.Array(Type.Object({ context: Type.String(), path: Type.String(), readOnly: Type.Boolean(), version: Type.String() }))),
  createdAt: Type.String(),
}, {
  $id: 'Machine', title: 'Machine',
  description: "A microVM: its own kernel, systemd, processes and memory; restored from a snapshot, never booted in a caller's path.",
});

export const MachineListSchema = Type.Object({ machines: Type.Array(MachineSchema) });

export const MachineSnapshotSchema = Type.Object({
  id: Type.String(), machine: Type.String(), memoryMb: Type.Integer(), cpus: Type.Integer(), diskGb: Type.Integer(), createdAt: Type.String(),
}, { $id: 'MachineSnapshot', title: 'MachineSnapshot', description: 'RAM, device state and disk of a machine frozen at one instant.' });

export const CreateMachineRequestSchema = Type.Object({
  context: Type.Optional(Type.String({ maxLength: 1024 })), version: Type.Optional(Type.String({ maxLength: 128 })),
  image: Type.Optional(Type.String({ maxLength: 64 })), memoryMb: Type.Optional(Type.Integer()), cpus: Type.Optional(Type.Integer()),
  /** The disk's size in GiB: at least 8 (the default), at most the server's maximum. */
  diskGb: Type.Optional(Type.Integer()),
  idleTimeoutMs: Type.Optional(Type.Integer()),
  /** Narrows the context's (or, without a context, the tenant's) egress policy for this machine. */
  network: Type.Optional(NetworkPolicyInSchema),
  /**
   * Contexts copied into the guest at a path (docs/api.md, Machines: mounts); a writable one's
   * changes there commit into its context on a mount commit, the machine's commit, hibernate, stop and delete.
   */
  mounts: Type.Optional(Type.Array(MountSchema, { maxItems: MAX_MOUNTS })),
}, strict);

/** Grows a running (or hibernated) machine's disk and its root file system, online. Disks never shrink. */
export const ResizeMachineDiskRequestSchema = Type.Object({ diskGb: Type.Integer() }, strict);

/** A command in a live machine: a query's request without versions, commits, users, egress narrowing or limits but `outputBytes`. */
export const MachineExecRequestSchema = Type.Object({
  command: Type.Optional(Type.String({ maxLength: 1 << 20 })),
  argv: Type.Optional(Type.Array(Type.String(), { minItems: 1, maxItems: 4096 })),
  stdin: Type.Optional(Type.String()),
  env: Type.Optional(EnvSchema),
  cwd: Type.Optional(Type.String({ maxLength: 4096 })),
  timeoutMs: Type.Optional(TimeoutMsSchema),
  limits: Type.Optional(Type.Pick(ExecLimitsSchema, ['outputBytes'])),
}, strict);

export const MachineUsageSchema = Type.Object({ wallMs: Type.Number() }, { title: 'MachineUsage' });

export const MachineExecResultSchema = Type.Object({
  exitCode: Type.Integer(), signal: Type.Optional(Type.String()), timedOut: Type.Boolean(),
  /** Set when a limit ended the command (with `timedOut`: its `timeoutMs`). */
  limit: Type.Optional(LimitHitSchema),
  stdout: Type.String(), stderr: Type.String(), truncated: Type.Boolean(), usage: MachineUsageSchema,
}, { title: 'MachineExecResult' });

export const MachineExecEventSchema = Type.Union([
  OutputEventSchema,
  Type.Interface([Type.Omit(MachineExecResultSchema, ['stdout', 'stderr'])], { type: Type.Literal('exit') }),
  ErrorEventSchema,
]);

export const MachineConsoleSchema = Type.Object({
  /** Its last lines, oldest first, without line ends (at most the `tail` asked for, from at most its last 1 MiB). */
  lines: Type.Array(Type.String()),
  /** Earlier lines were left out. */
  truncated: Type.Boolean(),
  /** Bytes the log holds in all (it grows across the machine's restores and wakes on this worker). */
  size: Type.Integer(),
}, { $id: 'MachineConsole', title: 'MachineConsole', description: "The end of a machine's serial console log (`GET /v1/machines/{id}/console?tail=N`)." });

export const MachineConsoleQuerySchema = Type.Object({ tail: Type.Optional(Type.Integer({ minimum: 1, maximum: MACHINE_CONSOLE_MAX_LINES })) }, strict);

export const MachinePtyQuerySchema = Type.Object({
  cols: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })), rows: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
}, strict);

/**
 * A PTY's control messages (WebSocket text frames, JSON); its bytes both ways are binary frames.
 * Client to server: `resize`. Server to client: `exit` when the shell ended (then the socket closes).
 */
export const PtyMessageSchema = Type.Union([
  Type.Object({ type: Type.Literal('resize'), cols: Type.Integer(), rows: Type.Integer() }),
  Type.Object({ type: Type.Literal('exit'), exitCode: Type.Union([Type.Integer(), Type.Null()]), signal: Type.Optional(Type.String()) }),
]);

/** A machine or a snapshot by id as a path parameter. */
export const IdParamsSchema = Type.Object({ id: Type.String({ maxLength: 128 }) });

/** A machine and a path (the rest of the URL) as path parameters. */
export const MachineFileParamsSchema = Type.Object({ id: Type.String({ maxLength: 128 }), '*': Type.String() });

/** How many machines a restore or a fork makes (default 1). */
export const CountBodySchema = Type.Object({ count: Type.Optional(Type.Integer()) }, strict);

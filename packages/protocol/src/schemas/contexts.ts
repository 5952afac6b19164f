import { Type } from 'typebox';
import { DIFF_KINDS, VERSION_CAUSE_KINDS } from '../constants.js';
import { EnvSchema, NameSchema, NetworkPolicySchema, VersionIdSchema, oneOf, strict } from './common.js';
import { FileTypeSchema } from './files.js';

/** Contexts, their versions and history (reset, diff, merge), and their network policy and log. */

export const ContextDefaultsSchema = Type.Object({
  env: Type.Optional(EnvSchema), cwd: Type.Optional(Type.String({ maxLength: 4096 })), user: Type.Optional(Type.String({ maxLength: 129 })),
}, {
  ...strict, title: 'ContextDefaults',
  description: "A context's defaults: environment (merged under a request's `env`), working directory and user (`root`, or a user of "
    + "the context's /etc/passwd, `name`, `name:group`, `uid` or `uid:gid`, as a Dockerfile's USER).",
});

export const ContextConfigSchema = Type.Object({
  entrypoint: Type.Optional(Type.Array(Type.String())), cmd: Type.Optional(Type.Array(Type.String())),
  exposedPorts: Type.Optional(Type.Array(Type.String())), labels: Type.Optional(EnvSchema),
}, { title: 'ContextConfig', description: "An image's (or a Dockerfile's) entrypoint, command, exposed ports and labels: recorded, not run." });

export const ContextSchema = Type.Object({
  name: Type.String(), head: Type.String(),
  /** The image it was made from: `debian`, or a pulled image's reference. */
  image: Type.String(),
  createdAt: Type.String(), updatedAt: Type.String(),
  /** Its own egress policy, if one is set (forks inherit it); else its tenant's applies. */
  network: Type.Optional(NetworkPolicySchema),
  /** What its queries and services run with unless a request says otherwise (forks inherit them). */
  defaults: Type.Optional(ContextDefaultsSchema),
  /** What its image (or Dockerfile) says the context runs, kept as it was given. */
  config: Type.Optional(ContextConfigSchema),
}, { $id: 'Context', title: 'Context' });

export const CreateContextBodySchema = Type.Object({
  name: NameSchema,
  image: Type.Optional(Type.String({ maxLength: 512 })),
  from: Type.Optional(Type.Object({ context: NameSchema, version: Type.Optional(VersionIdSchema) }, strict)),
  /** Starts with an empty tree (one version hides every path of its image): a volume for data, mounted into other work. */
  empty: Type.Optional(Type.Boolean()),
}, strict);

export const PatchContextBodySchema = Type.Object({ defaults: ContextDefaultsSchema }, strict);

export const ForkBodySchema = Type.Object({ name: NameSchema, version: Type.Optional(VersionIdSchema) }, strict);

export const VersionCauseKindSchema = oneOf(VERSION_CAUSE_KINDS, { title: 'VersionCauseKind', description: 'What made a version.' });

export const VersionCauseSchema = Type.Object({
  kind: VersionCauseKindSchema,
  command: Type.Optional(Type.String()),
  /** The exit code of the query (`exec`) or service run (`service`) whose writes this version holds. */
  exitCode: Type.Optional(Type.Integer()),
  /** The contexts the query saw mounted, each at the version it saw (and the version its writes became). */
  mounts: Type.Optional(Type.Array(Type.Object({
    context: Type.String(), path: Type.String(), version: Type.String(), readOnly: Type.Boolean(), wrote: Type.Optional(Type.String()),
  }))),
  /** For writes through a mount: the query's context and the version committed with this one. */
  mountedBy: Type.Optional(Type.Object({ context: Type.String(), path: Type.String(), version: Type.String() })),
  /** In a cluster, a service run's writes: the worker that ran it and the epoch of the lease its commit was fenced by. */
  lease: Type.Optional(Type.Object({ worker: Type.String(), epoch: Type.Integer() })),
}, { title: 'VersionCause' });

export const VersionSchema = Type.Object({
  id: Type.String(),
  parent: Type.Union([Type.String(), Type.Null()]),
  createdAt: Type.String(),
  cause: VersionCauseSchema,
  /** Bytes this version added over its parent. */
  bytes: Type.Integer(),
  /** A merge's second parent: the source context's version that was merged (absent for other versions). */
  merged: Type.Optional(Type.String()),
}, { $id: 'Version', title: 'Version' });

export const VersionsQuerySchema = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })), before: Type.Optional(VersionIdSchema),
}, strict);

export const ResetBodySchema = Type.Object({ version: VersionIdSchema }, strict);

export const MergeBodySchema = Type.Object({ from: Type.String({ minLength: 1, maxLength: 128 }) }, strict);

export const DiffQuerySchema = Type.Object({
  from: Type.Optional(VersionIdSchema), to: Type.Optional(VersionIdSchema), path: Type.Optional(Type.String({ maxLength: 4096 })),
}, strict);

export const DiffChangeSchema = Type.Object({
  path: Type.String(), kind: oneOf(DIFF_KINDS), type: FileTypeSchema, size: Type.Optional(Type.Integer()),
}, { title: 'DiffChange' });

export const DiffResultSchema = Type.Object({
  changes: Type.Array(DiffChangeSchema),
  /** With `path`: a unified diff of that file. */
  patch: Type.Optional(Type.String()),
}, { title: 'DiffResult' });

export const ContextNetworkSchema = Type.Object({
  /** The context's own policy (null: its tenant's applies). */
  policy: Type.Union([NetworkPolicySchema, Type.Null()]),
  /** What its sandboxes get: its own policy within its tenant's. */
  effective: NetworkPolicySchema,
}, { title: 'ContextNetwork', description: "A context's network settings: its own policy (absent: the tenant's), and what its sandboxes get." });

export const ConnectionKindSchema = Type.Union([Type.Literal('query'), Type.Literal('service'), Type.Literal('machine'), Type.Literal('webhook')], {
  title: 'ConnectionKind', description: 'What made an egress connection: a query, a service run, a machine, a webhook delivery.',
});

export const NetworkConnectionSchema = Type.Object({
  time: Type.String(), host: Type.String(), port: Type.Integer(), bytesOut: Type.Number(), bytesIn: Type.Number(),
  allowed: Type.Boolean(),
  /** Why it was refused (or why it failed). */
  reason: Type.Optional(Type.String()),
  kind: ConnectionKindSchema,
}, { title: 'NetworkConnection', description: 'One connection a sandbox asked the egress proxy for.' });

export const NetworkLogQuerySchema = Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })) }, strict);

import { TIMEOUT_CEILING_MS, VERSION_CAUSE_KINDS } from '@shellbase/protocol';
import { Type, type Static } from 'typebox';

/** TypeBox schemas of HTTP API v1: request validation and the OpenAPI document come from these (api/wire-check.ts holds them to packages/protocol). */
const strict = { additionalProperties: false } as const;

/** One of the protocol's string constants (its state and kind unions are defined once, there). */
export const oneOf = <Values extends string[]>(values: readonly [...Values]) => Type.Enum<Values>(values);

export const Name = Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_-][A-Za-z0-9._-]*$' });
export const VersionId = Type.String({ minLength: 1, maxLength: 128 });

export const ErrorResponse = Type.Object({
  error: Type.Object({
    code: Type.String(), message: Type.String(),
    details: Type.Optional(Type.Record(Type.String(), Type.Unknown())), hint: Type.Optional(Type.String()),
  }),
}, { $id: 'Error' });

/** An egress policy as the API returns it. */
export const NetworkPolicy = Type.Union([
  Type.Object({ egress: Type.Literal('none') }, strict),
  Type.Object({ egress: Type.Literal('allow'), domains: Type.Array(Type.String()) }, strict),
  Type.Object({ egress: Type.Literal('public') }, strict),
]);

/**
 * An egress policy as requests give it: any object here, checked by
 * net/policy.ts (whose errors name the bad field, domain or wildcard).
 */
export const NetworkPolicyIn = Type.Unsafe<Static<typeof NetworkPolicy>>({
  type: 'object', description: '{"egress": "none"}, {"egress": "public"} or {"egress": "allow", "domains": ["api.example.com", "*.github.com"]}',
});

const Env = Type.Record(Type.String(), Type.String());

export const ContextDefaults = Type.Object({
  env: Type.Optional(Env), cwd: Type.Optional(Type.String({ maxLength: 4096 })), user: Type.Optional(Type.String({ maxLength: 129 })),
}, strict);

export const ContextConfig = Type.Object({
  entrypoint: Type.Optional(Type.Array(Type.String())), cmd: Type.Optional(Type.Array(Type.String())),
  exposedPorts: Type.Optional(Type.Array(Type.String())), labels: Type.Optional(Env),
});

export const Context = Type.Object({
  name: Type.String(), head: Type.String(), image: Type.String(), createdAt: Type.String(), updatedAt: Type.String(),
  network: Type.Optional(NetworkPolicy),
  defaults: Type.Optional(ContextDefaults), config: Type.Optional(ContextConfig),
}, { $id: 'Context' });

export const PatchContextBody = Type.Object({ defaults: ContextDefaults }, strict);

export const Version = Type.Object({
  id: Type.String(),
  parent: Type.Union([Type.String(), Type.Null()]),
  createdAt: Type.String(),
  cause: Type.Object({ kind: oneOf(VERSION_CAUSE_KINDS), command: Type.Optional(Type.String()), exitCode: Type.Optional(Type.Integer()) }),
  bytes: Type.Integer(),
  merged: Type.Optional(Type.String()),
}, { $id: 'Version' });

export const CreateContextBody = Type.Object({
  name: Name,
  image: Type.Optional(Type.String({ maxLength: 512 })),
  from: Type.Optional(Type.Object({ context: Name, version: Type.Optional(VersionId) }, strict)),
}, strict);

export const ForkBody = Type.Object({ name: Name, version: Type.Optional(VersionId) }, strict);

export const NameParams = Type.Object({ name: Type.String({ maxLength: 1024 }) });

export const VersionsQuery = Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })), before: Type.Optional(VersionId) }, strict);

export const ExecLimits = Type.Object({
  memoryMb: Type.Optional(Type.Number()), pids: Type.Optional(Type.Number()), cpus: Type.Optional(Type.Number()),
  diskMb: Type.Optional(Type.Number()), outputBytes: Type.Optional(Type.Number()),
}, strict);

/** A time limit in milliseconds: the schema stops only what no tenant may ask for (its own maximum is checked by core/validate.ts). */
export const TimeoutMs = Type.Number({ maximum: TIMEOUT_CEILING_MS });

/** Which limit ended a command, its value, and the most the tenant may ask for. */
export const LimitHit = Type.Object({ name: Type.Literal('timeoutMs'), value: Type.Number(), max: Type.Number() });

export const ExecBody = Type.Object({
  command: Type.Optional(Type.String({ maxLength: 1 << 20 })),
  argv: Type.Optional(Type.Array(Type.String(), { minItems: 1, maxItems: 4096 })),
  stdin: Type.Optional(Type.String()),
  env: Type.Optional(Type.Record(Type.String(), Type.String())),
  cwd: Type.Optional(Type.String({ maxLength: 4096 })),
  user: Type.Optional(Type.String({ maxLength: 129 })),
  version: Type.Optional(VersionId),
  commit: Type.Optional(Type.Union([Type.Literal('always'), Type.Literal('on-success'), Type.Literal('never')])),
  onConflict: Type.Optional(Type.Union([Type.Literal('fail'), Type.Literal('retry')])),
  timeoutMs: Type.Optional(TimeoutMs),
  limits: Type.Optional(ExecLimits),
  network: Type.Optional(NetworkPolicyIn),
}, strict);
export type ExecBodyT = Static<typeof ExecBody>;

export const ExecResult = Type.Object({
  exitCode: Type.Integer(),
  signal: Type.Optional(Type.String()),
  timedOut: Type.Boolean(),
  oomKilled: Type.Boolean(),
  diskLimitHit: Type.Optional(Type.Boolean()),
  stdout: Type.String(),
  stderr: Type.String(),
  truncated: Type.Boolean(),
  baseVersion: Type.String(),
  version: Type.String(),
  committed: Type.Boolean(),
  conflict: Type.Optional(Type.Object({ paths: Type.Array(Type.String()), version: Type.String() })),
  retries: Type.Optional(Type.Integer()),
  limit: Type.Optional(LimitHit),
  usage: Type.Object({
    cpuMs: Type.Number(), wallMs: Type.Number(), memoryPeakBytes: Type.Number(), bytesWritten: Type.Number(),
    egressBytes: Type.Optional(Type.Number()), ingressBytes: Type.Optional(Type.Number()),
  }),
}, { $id: 'ExecResult' });

export const errorResponses = {
  400: ErrorResponse, 401: ErrorResponse, 404: ErrorResponse, 409: ErrorResponse, 413: ErrorResponse,
  412: ErrorResponse, 500: ErrorResponse,
};

import { Type, type Static, type TSchemaOptions } from 'typebox';
import { TIMEOUT_CEILING_MS } from '../constants.js';
import type { ErrorCode } from '../errors.js';

/**
 * What every resource's schemas share. A schema's `title` names a type clients have and its
 * `description` says what that type is: the OpenAPI document carries both, and the Python SDK's
 * classes are generated from the titled schemas there (scripts/wire-types.mjs). Request bodies,
 * parameters and queries have no title: clients build those from their own options. Fields are
 * documented with comments, which the types derived in ../types.ts keep.
 */

/** Objects that refuse properties they do not name (request bodies and queries). */
export const strict = { additionalProperties: false } as const;

/** One of the protocol's string constants (its state and kind unions are defined once, in constants.ts). */
export const oneOf = <Values extends string[]>(values: readonly [...Values], options?: TSchemaOptions) => Type.Enum<Values>(values, options);

export const NameSchema = Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_-][A-Za-z0-9._-]*$' });
export const VersionIdSchema = Type.String({ minLength: 1, maxLength: 128 });
export const EnvSchema = Type.Record(Type.String(), Type.String());

/** A time limit in milliseconds: the schema stops only what no tenant may ask for (its own maximum is checked by core/validate.ts). */
export const TimeoutMsSchema = Type.Number({ maximum: TIMEOUT_CEILING_MS });

/** A context's name as a path parameter (the engine checks it). */
export const NameParamsSchema = Type.Object({ name: Type.String({ maxLength: 1024 }) });

/**
 * The wire form of an error: the body is `{error: ErrorBody}`. Its code is one of ERROR_CODES
 * (errors.ts); the document, which every error response of every route repeats, says string.
 */
export const ErrorBodySchema = Type.Object({
  code: Type.Unsafe<ErrorCode>(Type.String()), message: Type.String(),
  details: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  /** How to fix it ("pass timeoutMs ≤ 600000"). */
  hint: Type.Optional(Type.String()),
});

export const ErrorResponseSchema = Type.Object({ error: ErrorBodySchema }, { $id: 'Error' });

export const NoEgressSchema = Type.Object({ egress: Type.Literal('none') }, {
  ...strict, title: 'NoEgress', description: 'No network at all: no proxy, and names do not resolve.',
});
export const AllowEgressSchema = Type.Object({ egress: Type.Literal('allow'), domains: Type.Array(Type.String()) }, {
  ...strict, title: 'AllowEgress', description: "Only these names (`api.example.com`, `*.github.com`), through the sandbox's proxy.",
});
export const PublicEgressSchema = Type.Object({ egress: Type.Literal('public') }, {
  ...strict, title: 'PublicEgress', description: "Any public address, through the sandbox's proxy (private, loopback and link-local ones are refused).",
});
/** An egress policy as the API returns it (requests give it as NetworkPolicyInSchema). */
export const NetworkPolicySchema = Type.Union([NoEgressSchema, AllowEgressSchema, PublicEgressSchema], {
  title: 'NetworkPolicy',
  description: "Where a sandbox's connections may go (docs/api.md, Network): a context's narrows its tenant's; a query's, a service's or a machine's, its context's.",
});

/**
 * An egress policy as requests give it: any object here, checked by the server's net/policy.ts
 * (whose errors name the bad field, domain or wildcard).
 */
export const NetworkPolicyInSchema = Type.Unsafe<Static<typeof NetworkPolicySchema>>({
  type: 'object', description: '{"egress": "none"}, {"egress": "public"} or {"egress": "allow", "domains": ["api.example.com", "*.github.com"]}',
});

export const LimitHitSchema = Type.Object({ name: Type.Literal('timeoutMs'), value: Type.Number(), max: Type.Number() }, {
  title: 'LimitHit', description: 'The limit that ended a command (now only its time limit): its value for this run, and the most the tenant may ask for.',
});

/** A command's output as a stream line (a query's, a machine exec's, a build's RUN). */
export const OutputEventSchema = Type.Object({ type: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]), data: Type.String() });

/** The last line of a stream that failed after it started. */
export const ErrorEventSchema = Type.Object({ type: Type.Literal('error'), error: ErrorBodySchema });

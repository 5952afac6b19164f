import { Type } from 'typebox';
import { MAX_MOUNTS, SERVICE_ACCESS, SERVICE_STATES, TIMEOUT_CEILING_MS } from '../constants.js';
import { MountSchema } from './exec.js';
import { EnvSchema, NameSchema, NetworkPolicyInSchema, NetworkPolicySchema, oneOf, strict } from './common.js';

/** Services of a context: long-running processes on URLs that run only while they are used. */

export const ServiceStateSchema = oneOf(SERVICE_STATES, { title: 'ServiceState' });

export const ServiceAccessSchema = oneOf(SERVICE_ACCESS, {
  title: 'ServiceAccess', description: "`url`: the URL's token is enough; `key`: the gateway also wants the tenant's API key.",
});

/** The names in a list are checked by the server's engine/services/links.ts. */
export const ServiceShareSchema = Type.Union([Type.Literal('tenant'), Type.Array(Type.String(), { maxItems: 256 })], {
  title: 'ServiceShare', description: 'Who else reaches a service at `{name}.{context}.internal:{port}`: `"tenant"`, every context of the tenant, or those contexts.',
});

// Null first: with coerceTypes "array", a later array branch would turn null into [""].
export const ShareBodySchema = Type.Object({ share: Type.Union([Type.Null(), ServiceShareSchema]) }, strict);

export const ServiceSchema = Type.Object({
  name: Type.String(), context: Type.String(),
  /** As given: a string runs with bash -c, an array as argv. */
  command: Type.Union([Type.String(), Type.Array(Type.String())]),
  port: Type.Integer(),
  /** The gateway URL (its host label is an unguessable token). */
  url: Type.String(),
  /** The same service through a path prefix, for clients that cannot resolve *.localhost. */
  pathUrl: Type.String(),
  state: ServiceStateSchema,
  idleTimeoutMs: Type.Integer(),
  access: ServiceAccessSchema,
  /** The service's own narrowing of its context's egress policy, if any. */
  network: Type.Optional(NetworkPolicySchema),
  /** Who else reaches it at `{name}.{context}.internal:{port}`; absent: its own context only. */
  share: Type.Optional(ServiceShareSchema),
  /** Contexts mounted into its sandbox (a read-only one without `version` shows its head at each start). */
  mounts: Type.Optional(Type.Array(MountSchema)),
  createdAt: Type.String(),
}, { $id: 'Service', title: 'Service', description: 'A long-running process over a context, on a URL; it runs only while it is used.' });

export const CreateServiceRequestSchema = Type.Object({
  name: NameSchema,
  command: Type.Union([Type.String({ minLength: 1, maxLength: 1 << 16 }), Type.Array(Type.String(), { minItems: 1, maxItems: 4096 })]),
  port: Type.Integer(),
  env: Type.Optional(EnvSchema),
  idleTimeoutMs: Type.Optional(Type.Integer()),
  /** Milliseconds the port has to open after a start (default 30 s; at most the tenant's maximum `timeoutMs`). */
  startTimeoutMs: Type.Optional(Type.Integer({ maximum: TIMEOUT_CEILING_MS })),
  limits: Type.Optional(Type.Object({
    memoryMb: Type.Optional(Type.Number()), pids: Type.Optional(Type.Number()), cpus: Type.Optional(Type.Number()), diskMb: Type.Optional(Type.Number()),
  }, strict)),
  access: Type.Optional(ServiceAccessSchema),
  network: Type.Optional(NetworkPolicyInSchema),
  share: Type.Optional(ServiceShareSchema),
  /** As a query's (docs/api.md, Mounts): writes through a writable one commit with the service's own. */
  mounts: Type.Optional(Type.Array(MountSchema, { maxItems: MAX_MOUNTS })),
}, strict);

/** A context and one of its services as path parameters. */
export const ServiceParamsSchema = Type.Object({ name: Type.String({ maxLength: 1024 }), svc: Type.String({ maxLength: 1024 }) });

export const ServiceLogsQuerySchema = Type.Object({ tail: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })) }, strict);

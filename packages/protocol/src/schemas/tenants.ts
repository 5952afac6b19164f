import { Type } from 'typebox';
import { NameSchema, NetworkPolicyInSchema, NetworkPolicySchema, strict } from './common.js';

/** Tenants and their API keys (admin key only). */

export const TenantSchema = Type.Object({
  id: Type.String(), name: Type.String(), admin: Type.Boolean(), createdAt: Type.String(),
  /** The tenant's own quotas (absent ones are the server's defaults). */
  quotas: Type.Optional(Type.Record(Type.String(), Type.Number())),
  /** The tenant's egress policy (absent: the server's default, SHELLBASE_EGRESS). */
  network: Type.Optional(NetworkPolicySchema),
}, { title: 'Tenant' });

export const ApiKeySchema = Type.Object({
  /** Names the key without revealing it. */
  id: Type.String(),
  createdAt: Type.String(),
  revokedAt: Type.Union([Type.String(), Type.Null()]),
}, { title: 'ApiKey' });

export const CreateTenantBodySchema = Type.Object({
  name: NameSchema, quotas: Type.Optional(Type.Record(Type.String(), Type.Number())), network: Type.Optional(NetworkPolicyInSchema),
}, strict);

/** What an admin changes of a tenant: its quotas (replaced whole), its egress policy (null: the server's default). */
export const UpdateTenantBodySchema = Type.Object({
  quotas: Type.Optional(Type.Record(Type.String(), Type.Number())), network: Type.Optional(Type.Union([Type.Null(), NetworkPolicyInSchema])),
}, strict);

export const TenantParamsSchema = Type.Object({ tenant: Type.String({ maxLength: 1024 }) });

export const KeyParamsSchema = Type.Object({ tenant: Type.String({ maxLength: 1024 }), key: Type.String({ maxLength: 64 }) });

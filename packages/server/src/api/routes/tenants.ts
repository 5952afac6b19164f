import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { Name, NetworkPolicy, NetworkPolicyIn, errorResponses } from '../schemas.js';

export const TenantSchema = Type.Object({
  id: Type.String(), name: Type.String(), admin: Type.Boolean(), createdAt: Type.String(),
  quotas: Type.Optional(Type.Record(Type.String(), Type.Number())),
  network: Type.Optional(NetworkPolicy),
});
export const ApiKeySchema = Type.Object({ id: Type.String(), createdAt: Type.String(), revokedAt: Type.Union([Type.String(), Type.Null()]) });
/** What an admin changes of a tenant: its quotas (replaced whole), its egress policy (null: the server's default). */
const UpdateTenantBody = Type.Object({
  quotas: Type.Optional(Type.Record(Type.String(), Type.Number())), network: Type.Optional(Type.Union([Type.Null(), NetworkPolicyIn])),
}, { additionalProperties: false });
const CreateTenantBody = Type.Object({
  name: Name, quotas: Type.Optional(Type.Record(Type.String(), Type.Number())), network: Type.Optional(NetworkPolicyIn),
}, { additionalProperties: false });

/** Tenants (admin key only): create one with its first API key, list them. */
export function tenantRoutes(app: FastifyInstance, engine: Engine): void {
  app.post<{ Body: Static<typeof CreateTenantBody> }>('/v1/tenants', {
    schema: {
      tags: ['tenants'], body: CreateTenantBody,
      response: { 201: Type.Object({ tenant: TenantSchema, apiKey: Type.String() }), 403: errorResponses[401], ...errorResponses },
    },
  }, async (req, reply) => reply.status(201).send(await engine.tenants.create(req.caller, req.body.name, req.body.quotas, req.body.network)));

  const TenantParams = Type.Object({ tenant: Type.String({ maxLength: 1024 }) });
  const KeyParams = Type.Object({ tenant: Type.String({ maxLength: 1024 }), key: Type.String({ maxLength: 64 }) });
  const Key = ApiKeySchema;
  const denied = { 403: errorResponses[401], ...errorResponses };

  app.post<{ Params: Static<typeof TenantParams> }>('/v1/tenants/:tenant/keys', {
    schema: { tags: ['tenants'], params: TenantParams, response: { 201: Type.Object({ key: Key, apiKey: Type.String() }), ...denied } },
  }, async (req, reply) => reply.status(201).send(await engine.tenants.createKey(req.caller, req.params.tenant)));

  app.get<{ Params: Static<typeof TenantParams> }>('/v1/tenants/:tenant/keys', {
    schema: { tags: ['tenants'], params: TenantParams, response: { 200: Type.Object({ keys: Type.Array(Key) }), ...denied } },
  }, async (req) => ({ keys: await engine.tenants.listKeys(req.caller, req.params.tenant) }));

  app.delete<{ Params: Static<typeof KeyParams> }>('/v1/tenants/:tenant/keys/:key', {
    schema: { tags: ['tenants'], params: KeyParams, response: { 204: Type.Null(), ...denied } },
  }, async (req, reply) => { await engine.tenants.revoke(req.caller, req.params.tenant, req.params.key); return reply.status(204).send(); });

  app.delete<{ Params: Static<typeof TenantParams> }>('/v1/tenants/:tenant', {
    schema: { tags: ['tenants'], params: TenantParams, response: { 204: Type.Null(), ...denied } },
  }, async (req, reply) => { await engine.tenants.revoke(req.caller, req.params.tenant); return reply.status(204).send(); });

  app.put<{ Params: Static<typeof TenantParams>; Body: Static<typeof UpdateTenantBody> }>('/v1/tenants/:tenant', {
    schema: { tags: ['tenants', 'network'], params: TenantParams, body: UpdateTenantBody, response: { 200: TenantSchema, ...denied } },
  }, async (req) => engine.tenants.update(req.caller, req.params.tenant, req.body));

  app.get('/v1/tenants', {
    schema: { tags: ['tenants'], response: { 200: Type.Object({ tenants: Type.Array(TenantSchema) }), 403: errorResponses[401], ...errorResponses } },
  }, async (req) => ({ tenants: await engine.tenants.list(req.caller) }));
}

import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { ApiKeySchema as Key, CreateTenantBodySchema as CreateTenantBody, KeyParamsSchema as KeyParams, TenantParamsSchema as TenantParams, TenantSchema, UpdateTenantBodySchema as UpdateTenantBody } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';

/** Tenants (admin key only): create one with its first API key, list them. */
export function tenantRoutes(app: FastifyInstance, ops: Operations): void {
  app.post<{ Body: Static<typeof CreateTenantBody> }>('/v1/tenants', {
    config: { op: 'tenant.create' }, schema: {
      tags: ['tenants'], body: CreateTenantBody,
      response: { 201: Type.Object({ tenant: TenantSchema, apiKey: Type.String() }), 403: errorResponses[401], ...errorResponses },
    },
  }, async (req, reply) => reply.status(201).send(await ops.run(req.caller, 'tenant.create', { name: req.body.name, quotas: req.body.quotas, network: req.body.network })));

  const denied = { 403: errorResponses[401], ...errorResponses };

  app.post<{ Params: Static<typeof TenantParams> }>('/v1/tenants/:tenant/keys', {
    config: { op: 'tenant.createKey' }, schema: { tags: ['tenants'], params: TenantParams, response: { 201: Type.Object({ key: Key, apiKey: Type.String() }), ...denied } },
  }, async (req, reply) => reply.status(201).send(await ops.run(req.caller, 'tenant.createKey', { tenant: req.params.tenant })));

  app.get<{ Params: Static<typeof TenantParams> }>('/v1/tenants/:tenant/keys', {
    config: { op: 'tenant.listKeys' }, schema: { tags: ['tenants'], params: TenantParams, response: { 200: Type.Object({ keys: Type.Array(Key) }), ...denied } },
  }, async (req) => ({ keys: await ops.run(req.caller, 'tenant.listKeys', { tenant: req.params.tenant }) }));

  app.delete<{ Params: Static<typeof KeyParams> }>('/v1/tenants/:tenant/keys/:key', {
    config: { op: 'tenant.revoke' }, schema: { tags: ['tenants'], params: KeyParams, response: { 204: Type.Null(), ...denied } },
  }, async (req, reply) => { await ops.run(req.caller, 'tenant.revoke', { tenant: req.params.tenant, key: req.params.key }); return reply.status(204).send(); });

  app.delete<{ Params: Static<typeof TenantParams> }>('/v1/tenants/:tenant', {
    config: { op: 'tenant.revoke' }, schema: { tags: ['tenants'], params: TenantParams, response: { 204: Type.Null(), ...denied } },
  }, async (req, reply) => { await ops.run(req.caller, 'tenant.revoke', { tenant: req.params.tenant }); return reply.status(204).send(); });

  app.put<{ Params: Static<typeof TenantParams>; Body: Static<typeof UpdateTenantBody> }>('/v1/tenants/:tenant', {
    config: { op: 'tenant.update' }, schema: { tags: ['tenants', 'network'], params: TenantParams, body: UpdateTenantBody, response: { 200: TenantSchema, ...denied } },
  }, async (req) => ops.run(req.caller, 'tenant.update', { tenant: req.params.tenant, change: req.body }));

  app.get('/v1/tenants', {
    config: { op: 'tenant.list' }, schema: { tags: ['tenants'], response: { 200: Type.Object({ tenants: Type.Array(TenantSchema) }), 403: errorResponses[401], ...errorResponses } },
  }, async (req) => ({ tenants: await ops.run(req.caller, 'tenant.list', {}) }));
}

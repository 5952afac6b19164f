import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { Name, errorResponses } from '../schemas.js';

const TenantSchema = Type.Object({ id: Type.String(), name: Type.String(), admin: Type.Boolean(), createdAt: Type.String() });
// `quotas` (api-v1.md) is refused as an unknown field until quotas are enforced.
const CreateTenantBody = Type.Object({ name: Name }, { additionalProperties: false });

/** Tenants (admin key only): create one with its first API key, list them. */
export function tenantRoutes(app: FastifyInstance, engine: Engine): void {
  app.post<{ Body: Static<typeof CreateTenantBody> }>('/v1/tenants', {
    schema: {
      tags: ['tenants'], body: CreateTenantBody,
      response: { 201: Type.Object({ tenant: TenantSchema, apiKey: Type.String() }), 403: errorResponses[401], ...errorResponses },
    },
  }, async (req, reply) => reply.status(201).send(await engine.tenants.create(req.caller, req.body.name)));

  app.get('/v1/tenants', {
    schema: { tags: ['tenants'], response: { 200: Type.Object({ tenants: Type.Array(TenantSchema) }), 403: errorResponses[401], ...errorResponses } },
  }, async (req) => ({ tenants: await engine.tenants.list(req.caller) }));
}

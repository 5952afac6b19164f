import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { ContextSchema as Context, CreateContextBodySchema as CreateContextBody, ForkBodySchema as ForkBody, NameParamsSchema as NameParams, PatchContextBodySchema as PatchContextBody, VersionSchema as Version, VersionsQuerySchema as VersionsQuery } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';
import type { Static } from 'typebox';

/** Contexts and their history: create, list, get, set defaults, delete, fork, versions. */
export function contextRoutes(app: FastifyInstance, ops: Operations): void {
  app.post<{ Body: Static<typeof CreateContextBody> }>('/v1/contexts', {
    config: { op: 'context.create' }, schema: { tags: ['contexts'], body: CreateContextBody, response: { 201: Context, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await ops.run(req.caller, 'context.create', { body: req.body })));

  app.get('/v1/contexts', {
    config: { op: 'context.list' }, schema: { tags: ['contexts'], response: { 200: Type.Object({ contexts: Type.Array(Context) }), ...errorResponses } },
  }, async (req) => ({ contexts: await ops.run(req.caller, 'context.list', {}) }));

  app.get<{ Params: Static<typeof NameParams> }>('/v1/contexts/:name', {
    config: { op: 'context.get' }, schema: { tags: ['contexts'], params: NameParams, response: { 200: Context, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'context.get', { context: req.params.name }));

  app.patch<{ Params: Static<typeof NameParams>; Body: Static<typeof PatchContextBody> }>('/v1/contexts/:name', {
    config: { op: 'context.setDefaults' }, schema: { tags: ['contexts'], params: NameParams, body: PatchContextBody, response: { 200: Context, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'context.setDefaults', { context: req.params.name, defaults: req.body.defaults }));

  app.delete<{ Params: Static<typeof NameParams> }>('/v1/contexts/:name', {
    config: { op: 'context.delete' }, schema: { tags: ['contexts'], params: NameParams, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => {
    await ops.run(req.caller, 'context.delete', { context: req.params.name });
    return reply.status(204).send();
  });

  app.post<{ Params: Static<typeof NameParams>; Body: Static<typeof ForkBody> }>('/v1/contexts/:name/fork', {
    config: { op: 'context.fork' }, schema: { tags: ['history'], params: NameParams, body: ForkBody, response: { 201: Context, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await ops.run(req.caller, 'context.fork', { context: req.params.name, to: req.body })));

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof VersionsQuery> }>('/v1/contexts/:name/versions', {
    config: { op: 'context.versions' }, schema: {
      tags: ['history'], params: NameParams, querystring: VersionsQuery,
      response: { 200: Type.Object({ versions: Type.Array(Version) }), ...errorResponses },
    },
  }, async (req) => ({ versions: await ops.run(req.caller, 'context.versions', { context: req.params.name, limit: req.query.limit ?? 100, ...(req.query.before !== undefined ? { before: req.query.before } : {}) }) }));
}

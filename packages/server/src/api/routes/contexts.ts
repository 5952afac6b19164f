import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { Engine } from '../../engine/engine.js';
import { Context, CreateContextBody, ForkBody, NameParams, PatchContextBody, Version, VersionsQuery, errorResponses } from '../schemas.js';
import type { Static } from 'typebox';

/** Contexts and their history: create, list, get, set defaults, delete, fork, versions. */
export function contextRoutes(app: FastifyInstance, engine: Engine): void {
  app.post<{ Body: Static<typeof CreateContextBody> }>('/v1/contexts', {
    schema: { tags: ['contexts'], body: CreateContextBody, response: { 201: Context, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await engine.createContext(req.caller, req.body)));

  app.get('/v1/contexts', {
    schema: { tags: ['contexts'], response: { 200: Type.Object({ contexts: Type.Array(Context) }), ...errorResponses } },
  }, async (req) => ({ contexts: await engine.listContexts(req.caller) }));

  app.get<{ Params: Static<typeof NameParams> }>('/v1/contexts/:name', {
    schema: { tags: ['contexts'], params: NameParams, response: { 200: Context, ...errorResponses } },
  }, async (req) => engine.getContext(req.caller, req.params.name));

  app.patch<{ Params: Static<typeof NameParams>; Body: Static<typeof PatchContextBody> }>('/v1/contexts/:name', {
    schema: { tags: ['contexts'], params: NameParams, body: PatchContextBody, response: { 200: Context, ...errorResponses } },
  }, async (req) => engine.setDefaults(req.caller, req.params.name, req.body.defaults));

  app.delete<{ Params: Static<typeof NameParams> }>('/v1/contexts/:name', {
    schema: { tags: ['contexts'], params: NameParams, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => {
    await engine.deleteContext(req.caller, req.params.name);
    return reply.status(204).send();
  });

  app.post<{ Params: Static<typeof NameParams>; Body: Static<typeof ForkBody> }>('/v1/contexts/:name/fork', {
    schema: { tags: ['history'], params: NameParams, body: ForkBody, response: { 201: Context, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await engine.fork(req.caller, req.params.name, req.body)));

  app.get<{ Params: Static<typeof NameParams>; Querystring: Static<typeof VersionsQuery> }>('/v1/contexts/:name/versions', {
    schema: {
      tags: ['history'], params: NameParams, querystring: VersionsQuery,
      response: { 200: Type.Object({ versions: Type.Array(Version) }), ...errorResponses },
    },
  }, async (req) => ({ versions: await engine.versions(req.caller, req.params.name, req.query.limit ?? 100, req.query.before) }));
}

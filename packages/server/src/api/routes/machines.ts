import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Machines as MachineOps } from '../../machines/machines.js';
import { MACHINE_CONSOLE_MAX_LINES, MACHINE_STATES, PTY_PROTOCOL, SERVICE_ACCESS, type ServiceAccess } from '@shellbase/protocol';
import { ShellbaseError } from '../../errors.js';
import { ExecLimits, LimitHit, NetworkPolicy, NetworkPolicyIn, TimeoutMs, errorResponses, oneOf } from '../schemas.js';
import { respondExec } from './exec.js';

const strict = { additionalProperties: false } as const;
export const Port = Type.Object({ port: Type.Integer(), url: Type.String(), pathUrl: Type.String(), access: oneOf(SERVICE_ACCESS) });
export const Machine = Type.Object({
  id: Type.String(),
  state: oneOf(MACHINE_STATES),
  context: Type.Optional(Type.String()), version: Type.Optional(Type.String()), image: Type.String(),
  memoryMb: Type.Integer(), cpus: Type.Integer(), diskGb: Type.Integer(), network: Type.Optional(NetworkPolicy), idleTimeoutMs: Type.Integer(),
  snapshot: Type.Optional(Type.String()),
  ports: Type.Array(Port), createdAt: Type.String(),
}, { $id: 'Machine' });
export const Snapshot = Type.Object({
  id: Type.String(), machine: Type.String(), memoryMb: Type.Integer(), cpus: Type.Integer(), diskGb: Type.Integer(), createdAt: Type.String(),
}, { $id: 'MachineSnapshot' });
export const CreateBody = Type.Object({
  context: Type.Optional(Type.String({ maxLength: 1024 })), version: Type.Optional(Type.String({ maxLength: 128 })),
  image: Type.Optional(Type.String({ maxLength: 64 })), memoryMb: Type.Optional(Type.Integer()), cpus: Type.Optional(Type.Integer()),
  diskGb: Type.Optional(Type.Integer()), idleTimeoutMs: Type.Optional(Type.Integer()), network: Type.Optional(NetworkPolicyIn),
}, strict);
export const DiskBody = Type.Object({ diskGb: Type.Integer() }, strict);
const ExecBody = Type.Object({
  command: Type.Optional(Type.String({ maxLength: 1 << 20 })),
  argv: Type.Optional(Type.Array(Type.String(), { minItems: 1, maxItems: 4096 })),
  stdin: Type.Optional(Type.String()),
  env: Type.Optional(Type.Record(Type.String(), Type.String())),
  cwd: Type.Optional(Type.String({ maxLength: 4096 })),
  timeoutMs: Type.Optional(TimeoutMs),
  limits: Type.Optional(Type.Pick(ExecLimits, ['outputBytes'])),
}, strict);
export const ExecResult = Type.Object({
  exitCode: Type.Integer(), signal: Type.Optional(Type.String()), timedOut: Type.Boolean(), limit: Type.Optional(LimitHit),
  stdout: Type.String(), stderr: Type.String(), truncated: Type.Boolean(), usage: Type.Object({ wallMs: Type.Number() }),
});
export const ConsoleTail = Type.Object({ lines: Type.Array(Type.String()), truncated: Type.Boolean(), size: Type.Integer() }, { $id: 'MachineConsole' });
const ConsoleQuery = Type.Object({ tail: Type.Optional(Type.Integer({ minimum: 1, maximum: MACHINE_CONSOLE_MAX_LINES })) }, strict);
export const PtyQuery = Type.Object({ cols: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })), rows: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })) }, strict);
const Id = Type.Object({ id: Type.String({ maxLength: 128 }) });
const FileParams = Type.Object({ id: Type.String({ maxLength: 128 }), '*': Type.String() });
const CountBody = Type.Object({ count: Type.Optional(Type.Integer()) }, strict);
const Machines = Type.Object({ machines: Type.Array(Machine) });

/** Machines: create, list, get, exec, files, pause/resume/hibernate/stop/delete, console, pty, disk, snapshot, restore, fork, ports. */
export function machineRoutes(app: FastifyInstance, m: MachineOps): void {
  app.addSchema(Machine);
  app.addSchema(Snapshot);
  app.addSchema(ConsoleTail);
  const tags = ['machines'];
  app.post<{ Body: Static<typeof CreateBody> }>('/v1/machines', {
    schema: { tags, body: CreateBody, response: { 201: Machine, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await m.create(req.caller, req.body)));

  app.get('/v1/machines', { schema: { tags, response: { 200: Machines, ...errorResponses } } }, async (req) => ({ machines: await m.list(req.caller) }));

  app.get<{ Params: Static<typeof Id> }>('/v1/machines/:id', {
    schema: { tags, params: Id, response: { 200: Machine, ...errorResponses } },
  }, async (req) => m.get(req.caller, req.params.id));

  // Each refused by the lifecycle table (machines/lifecycle.ts) where it does not apply: 412 failed_precondition.
  for (const step of ['pause', 'resume', 'hibernate', 'stop'] as const) {
    app.post<{ Params: Static<typeof Id> }>(`/v1/machines/:id/${step}`, {
      schema: { tags, params: Id, response: { 200: Machine, ...errorResponses } },
    }, async (req) => m[step](req.caller, req.params.id));
  }

  app.get<{ Params: Static<typeof Id>; Querystring: Static<typeof ConsoleQuery> }>('/v1/machines/:id/console', {
    schema: { tags, params: Id, querystring: ConsoleQuery, response: { 200: ConsoleTail, ...errorResponses } },
  }, async (req) => m.consoleTail(req.caller, req.params.id, req.query.tail ?? 100));

  // The PTY is a WebSocket (api/pty.ts serves the upgrade); this documents it and answers a plain GET.
  app.get<{ Params: Static<typeof Id>; Querystring: Static<typeof PtyQuery> }>('/v1/machines/:id/pty', {
    schema: {
      tags, params: Id, querystring: PtyQuery, response: { ...errorResponses },
      description: `A WebSocket (subprotocol ${PTY_PROTOCOL}) to root's login shell on a terminal of cols × rows (default 80 × 24): `
        + 'binary frames carry its bytes both ways, text frames JSON control messages ({"type":"resize","cols":N,"rows":N} in, {"type":"exit",...} or {"type":"error",...} out). '
        + 'Authenticate with Authorization, or offer the subprotocol shellbase-key.BASE64URL(KEY) (browsers cannot set headers on a WebSocket). docs/api.md has the details.',
    },
  }, async () => {
    throw new ShellbaseError('invalid_argument', 'this route is a WebSocket', { hint: `open it with Upgrade: websocket and the subprotocol ${PTY_PROTOCOL}` });
  });

  app.delete<{ Params: Static<typeof Id> }>('/v1/machines/:id', {
    schema: { tags, params: Id, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => { await m.remove(req.caller, req.params.id); return reply.status(204).send(); });

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof DiskBody> }>('/v1/machines/:id/disk', {
    schema: { tags, params: Id, body: DiskBody, response: { 200: Machine, ...errorResponses } },
  }, async (req) => m.resizeDisk(req.caller, req.params.id, req.body.diskGb));

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof ExecBody> }>('/v1/machines/:id/exec', {
    schema: { tags, params: Id, body: ExecBody, response: { 200: ExecResult, ...errorResponses } },
  }, async (req, reply) => respondExec(req.headers.accept, reply, (hooks) => m.exec(req.caller, req.params.id, req.body, hooks)));

  app.get<{ Params: Static<typeof FileParams> }>('/v1/machines/:id/files/*', {
    schema: { tags, params: FileParams, response: { ...errorResponses } },
  }, async (req, reply) => {
    const r = await m.io.read(req.caller, req.params.id, `/${req.params['*']}`);
    if (r.kind === 'dir') return reply.send({ entries: r.entries });
    return reply.type('application/octet-stream').send(r.data);
  });

  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: 64 << 20 }, (_req, body, done) => done(null, body));
    scope.put<{ Params: Static<typeof FileParams>; Querystring: { mode?: string } }>('/v1/machines/:id/files/*', {
      schema: { tags, params: FileParams, querystring: Type.Object({ mode: Type.Optional(Type.String({ pattern: '^0?[0-7]{3,4}$' })) }, strict), response: { 204: Type.Null(), ...errorResponses } },
    }, async (req, reply) => {
      const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      await m.io.write(req.caller, req.params.id, `/${req.params['*']}`, body, req.query.mode ? parseInt(req.query.mode, 8) : 0o644);
      return reply.status(204).send();
    });
  });

  app.post<{ Params: Static<typeof Id> }>('/v1/machines/:id/snapshot', {
    schema: { tags, params: Id, response: { 200: Type.Object({ snapshot: Type.String() }), ...errorResponses } },
  }, async (req) => ({ snapshot: (await m.snapshot(req.caller, req.params.id)).id }));

  app.get('/v1/snapshots', { schema: { tags, response: { 200: Type.Object({ snapshots: Type.Array(Snapshot) }), ...errorResponses } } },
    async (req) => ({ snapshots: await m.listSnapshots(req.caller) }));

  app.delete<{ Params: Static<typeof Id> }>('/v1/snapshots/:id', {
    schema: { tags, params: Id, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => { await m.deleteSnapshot(req.caller, req.params.id); return reply.status(204).send(); });

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof CountBody> }>('/v1/snapshots/:id/machines', {
    schema: { tags, params: Id, body: CountBody, response: { 201: Machines, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send({ machines: await m.restore(req.caller, req.params.id, req.body?.count ?? 1) }));

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof CountBody> }>('/v1/machines/:id/fork', {
    schema: { tags, params: Id, body: CountBody, response: { 201: Machines, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send({ machines: await m.fork(req.caller, req.params.id, req.body?.count ?? 1) }));

  app.post<{ Params: Static<typeof Id>; Body: { port: number; access?: ServiceAccess } }>('/v1/machines/:id/ports', {
    schema: {
      tags, params: Id, body: Type.Object({ port: Type.Integer(), access: Type.Optional(oneOf(SERVICE_ACCESS)) }, strict),
      response: { 200: Type.Object({ url: Type.String(), pathUrl: Type.String(), access: oneOf(SERVICE_ACCESS) }), ...errorResponses },
    },
  }, async (req) => m.expose(req.caller, req.params.id, req.body.port, req.body.access));

  app.post<{ Params: Static<typeof Id>; Body: { context: string } }>('/v1/machines/:id/commit', {
    schema: { tags, params: Id, body: Type.Object({ context: Type.String({ maxLength: 1024 }) }, strict), response: { 200: Type.Object({ version: Type.String() }), ...errorResponses } },
  }, async (req) => m.commit(req.caller, req.params.id, req.body.context));
}

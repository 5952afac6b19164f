import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import type { Operations } from '../../ops/dispatch.js';
import { PTY_PROTOCOL, SERVICE_ACCESS, type ServiceAccess } from '@shellbase/protocol';
import { ShellbaseError } from '../../errors.js';
import { CountBodySchema as CountBody, CreateMachineRequestSchema as CreateBody, IdParamsSchema as Id, MachineConsoleQuerySchema as ConsoleQuery, MachineConsoleSchema as ConsoleTail, MachineExecRequestSchema as ExecBody, MachineExecResultSchema as ExecResult, MachineFileParamsSchema as FileParams, MachineListSchema as Machines, MachinePtyQuerySchema as PtyQuery, MachineSchema as Machine, MachineSnapshotSchema as Snapshot, RunCodeRequestSchema as CodeBody, CodeExecutionSchema as CodeExecution, ResizeMachineDiskRequestSchema as DiskBody, ScreenQuerySchema as ScreenQuery, MachineInputSchema as InputBody, CursorSchema as Cursor, oneOf } from '@shellbase/protocol/schemas';
import { errorResponses } from '../schemas.js';
import { respondExec } from './exec.js';
import { NDJSON, abortOnClose, respondEvents } from '../ndjson.js';

const strict = { additionalProperties: false } as const;

/** Machines: create, list, get, exec, code, screen, input, files, pause/resume/hibernate/stop/delete, console, pty, disk, snapshot, restore, fork, ports. */
export function machineRoutes(app: FastifyInstance, ops: Operations): void {
  app.addSchema(Machine);
  app.addSchema(Snapshot);
  app.addSchema(ConsoleTail);
  const tags = ['machines'];
  app.post<{ Body: Static<typeof CreateBody> }>('/v1/machines', {
    config: { op: 'machine.create' }, schema: { tags, body: CreateBody, response: { 201: Machine, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send(await ops.run(req.caller, 'machine.create', { req: req.body })));

  app.get('/v1/machines', { config: { op: 'machine.list' }, schema: { tags, response: { 200: Machines, ...errorResponses } } }, async (req) => ({ machines: await ops.run(req.caller, 'machine.list', {}) }));

  app.get<{ Params: Static<typeof Id> }>('/v1/machines/:id', {
    config: { op: 'machine.get' }, schema: { tags, params: Id, response: { 200: Machine, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'machine.get', { id: req.params.id }));

  // Each refused by the lifecycle table (machines/lifecycle.ts) where it does not apply: 412 failed_precondition.
  for (const step of ['pause', 'resume', 'hibernate', 'stop'] as const) {
    app.post<{ Params: Static<typeof Id> }>(`/v1/machines/:id/${step}`, {
      config: { op: `machine.${step}` }, schema: { tags, params: Id, response: { 200: Machine, ...errorResponses } },
    }, async (req) => ops.run(req.caller, `machine.${step}`, { id: req.params.id }));
  }

  app.get<{ Params: Static<typeof Id>; Querystring: Static<typeof ConsoleQuery> }>('/v1/machines/:id/console', {
    config: { op: 'machine.console' }, schema: { tags, params: Id, querystring: ConsoleQuery, response: { 200: ConsoleTail, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'machine.console', { id: req.params.id, lines: req.query.tail ?? 100 }));

  // The PTY is a WebSocket (api/pty.ts serves the upgrade); this documents it and answers a plain GET.
  app.get<{ Params: Static<typeof Id>; Querystring: Static<typeof PtyQuery> }>('/v1/machines/:id/pty', {
    config: { op: 'machine.pty' }, schema: {
      tags, params: Id, querystring: PtyQuery, response: { ...errorResponses },
      description: `A WebSocket (subprotocol ${PTY_PROTOCOL}) to root's login shell on a terminal of cols × rows (default 80 × 24): `
        + 'binary frames carry its bytes both ways, text frames JSON control messages ({"type":"resize","cols":N,"rows":N} in, {"type":"exit",...} or {"type":"error",...} out). '
        + 'Authenticate with Authorization, or offer the subprotocol shellbase-key.BASE64URL(KEY) (browsers cannot set headers on a WebSocket). docs/api.md has the details.',
    },
  }, async () => {
    throw new ShellbaseError('invalid_argument', 'this route is a WebSocket', { hint: `open it with Upgrade: websocket and the subprotocol ${PTY_PROTOCOL}` });
  });

  app.delete<{ Params: Static<typeof Id> }>('/v1/machines/:id', {
    config: { op: 'machine.remove' }, schema: { tags, params: Id, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => { await ops.run(req.caller, 'machine.remove', { id: req.params.id }); return reply.status(204).send(); });

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof DiskBody> }>('/v1/machines/:id/disk', {
    config: { op: 'machine.resizeDisk' }, schema: { tags, params: Id, body: DiskBody, response: { 200: Machine, ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'machine.resizeDisk', { id: req.params.id, diskGb: req.body.diskGb }));

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof ExecBody> }>('/v1/machines/:id/exec', {
    config: { op: 'machine.exec' }, schema: { tags, params: Id, body: ExecBody, response: { 200: ExecResult, ...errorResponses } },
  }, async (req, reply) => respondExec(req.headers.accept, reply, (hooks) => ops.run(req.caller, 'machine.exec', { id: req.params.id, req: req.body, hooks })));

  // A cell in the machine's code interpreter: the execution as JSON, or its events as NDJSON lines ending with `end`.
  app.post<{ Params: Static<typeof Id>; Body: Static<typeof CodeBody> }>('/v1/machines/:id/code', {
    config: { op: 'machine.code' }, schema: { tags, params: Id, body: CodeBody, response: { 200: CodeExecution, ...errorResponses } },
  }, async (req, reply) => {
    const streaming = (req.headers.accept ?? '').includes(NDJSON);
    return respondEvents(req.headers.accept, reply, 'end', async (report, signal) => {
      const done = await ops.run(req.caller, 'machine.code', { id: req.params.id, req: req.body, hooks: { signal, ...(streaming ? { onEvent: (e) => report(e) } : {}) } });
      return streaming ? {} : done;
    });
  });

  // The machine's screen (display :0 of the desktop image) as a PNG, and one input to it.
  app.get<{ Params: Static<typeof Id>; Querystring: Static<typeof ScreenQuery> }>('/v1/machines/:id/screen', {
    config: { op: 'machine.screen' }, schema: {
      tags, params: Id, querystring: ScreenQuery, response: { ...errorResponses },
      description: 'The machine\'s display :0 as image/png (a machine of the desktop image has one; others answer 412).',
    },
  }, async (req, reply) => {
    const png = await ops.run(req.caller, 'machine.screen', { id: req.params.id, opts: { ...(req.query.pointer !== undefined ? { pointer: req.query.pointer } : {}), signal: abortOnClose(reply) } });
    return reply.type('image/png').header('cache-control', 'no-store').send(png);
  });

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof InputBody> }>('/v1/machines/:id/input', {
    config: { op: 'machine.input' }, schema: { tags, params: Id, body: InputBody, response: { 200: Cursor, ...errorResponses } },
  }, async (req, reply) => ops.run(req.caller, 'machine.input', { id: req.params.id, input: req.body, opts: { signal: abortOnClose(reply) } }));

  app.get<{ Params: Static<typeof FileParams> }>('/v1/machines/:id/files/*', {
    config: { op: 'machine.readFile' }, schema: { tags, params: FileParams, response: { ...errorResponses } },
  }, async (req, reply) => {
    const r = await ops.run(req.caller, 'machine.readFile', { id: req.params.id, path: `/${req.params['*']}` });
    if (r.kind === 'dir') return reply.send({ entries: r.entries });
    return reply.type('application/octet-stream').send(r.data);
  });

  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: 64 << 20 }, (_req, body, done) => done(null, body));
    scope.put<{ Params: Static<typeof FileParams>; Querystring: { mode?: string } }>('/v1/machines/:id/files/*', {
      config: { op: 'machine.writeFile' }, schema: { tags, params: FileParams, querystring: Type.Object({ mode: Type.Optional(Type.String({ pattern: '^0?[0-7]{3,4}$' })) }, strict), response: { 204: Type.Null(), ...errorResponses } },
    }, async (req, reply) => {
      const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      await ops.run(req.caller, 'machine.writeFile', { id: req.params.id, path: `/${req.params['*']}`, data: body, mode: req.query.mode ? parseInt(req.query.mode, 8) : 0o644 });
      return reply.status(204).send();
    });
  });

  app.post<{ Params: Static<typeof Id> }>('/v1/machines/:id/snapshot', {
    config: { op: 'machine.snapshot' }, schema: { tags, params: Id, response: { 200: Type.Object({ snapshot: Type.String() }), ...errorResponses } },
  }, async (req) => ({ snapshot: (await ops.run(req.caller, 'machine.snapshot', { id: req.params.id })).id }));

  app.get('/v1/snapshots', { config: { op: 'snapshot.list' }, schema: { tags, response: { 200: Type.Object({ snapshots: Type.Array(Snapshot) }), ...errorResponses } } },
    async (req) => ({ snapshots: await ops.run(req.caller, 'snapshot.list', {}) }));

  app.delete<{ Params: Static<typeof Id> }>('/v1/snapshots/:id', {
    config: { op: 'snapshot.delete' }, schema: { tags, params: Id, response: { 204: Type.Null(), ...errorResponses } },
  }, async (req, reply) => { await ops.run(req.caller, 'snapshot.delete', { id: req.params.id }); return reply.status(204).send(); });

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof CountBody> }>('/v1/snapshots/:id/machines', {
    config: { op: 'snapshot.restore' }, schema: { tags, params: Id, body: CountBody, response: { 201: Machines, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send({ machines: await ops.run(req.caller, 'snapshot.restore', { id: req.params.id, count: req.body?.count ?? 1 }) }));

  app.post<{ Params: Static<typeof Id>; Body: Static<typeof CountBody> }>('/v1/machines/:id/fork', {
    config: { op: 'machine.fork' }, schema: { tags, params: Id, body: CountBody, response: { 201: Machines, ...errorResponses } },
  }, async (req, reply) => reply.status(201).send({ machines: await ops.run(req.caller, 'machine.fork', { id: req.params.id, count: req.body?.count ?? 1 }) }));

  app.post<{ Params: Static<typeof Id>; Body: { port: number; access?: ServiceAccess } }>('/v1/machines/:id/ports', {
    config: { op: 'machine.expose' }, schema: {
      tags, params: Id, body: Type.Object({ port: Type.Integer(), access: Type.Optional(oneOf(SERVICE_ACCESS)) }, strict),
      response: { 200: Type.Object({ url: Type.String(), pathUrl: Type.String(), access: oneOf(SERVICE_ACCESS) }), ...errorResponses },
    },
  }, async (req) => ops.run(req.caller, 'machine.expose', { id: req.params.id, port: req.body.port, access: req.body.access }));

  app.post<{ Params: Static<typeof Id>; Body: { context: string } }>('/v1/machines/:id/commit', {
    config: { op: 'machine.commit' }, schema: { tags, params: Id, body: Type.Object({ context: Type.String({ maxLength: 1024 }) }, strict), response: { 200: Type.Object({ version: Type.String() }), ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'machine.commit', { id: req.params.id, context: req.body.context }));

  // The mount's path as one segment, its slashes encoded (`/mnt/data`: `%2Fmnt%2Fdata`).
  const MountAt = Type.Object({ id: Type.String({ maxLength: 128 }), path: Type.String({ maxLength: 4096 }) });
  app.post<{ Params: Static<typeof MountAt> }>('/v1/machines/:id/mounts/:path/commit', {
    config: { op: 'machine.commitMount' }, schema: { tags, params: MountAt, response: { 200: Type.Object({ version: Type.String() }), ...errorResponses } },
  }, async (req) => ops.run(req.caller, 'machine.commitMount', { id: req.params.id, path: req.params.path }));
}

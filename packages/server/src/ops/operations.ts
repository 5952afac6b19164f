import type { Caller } from '../core/deps.js';
import { checkTimeout } from '../core/validate.js';
import type { Engine } from '../engine/engine.js';
import type { Events } from '../events/index.js';
import { CODE_PORT, captureScreen, inputCommand, runCode, sendInput, type Agent, type Machines } from '../machines/index.js';
import type { Place } from './routing.js';
import type { EventFilter } from '../store/metadata/types.js';

/** What operations act on: the engine (contexts, queries, services, images, tenants), the machines, and tenants' events. */
export interface Parts { engine: Engine; machines: Machines; events: Events }

/** One operation: what it does for a caller, and (for an operation one worker of a cluster must serve) where. */
interface Operation<A, R> {
  run(parts: Parts, caller: Caller, args: A): Promise<R>;
  place?(args: A): Place;
}

const op = <A, R>(run: (parts: Parts, caller: Caller, args: A) => Promise<R>, place?: (args: A) => Place): Operation<A, R> =>
  (place ? { run, place } : { run });

/** The i-th parameter of a method. */
type Arg<F, I extends number> = F extends (...a: infer P) => unknown ? P[I] : never;
type E = Engine;
type M = Machines;
type Ev = Events;
type E2bHooks = ReturnType<Events['formatted']>;

/** A context by name. */
interface Named { context: string }
/** A machine (or a snapshot) by id. */
interface Id { id: string }
/** A service of a context. */
interface Svc { context: string; service: string }
/** A file of a context. */
interface File extends Named { path: string }

const onContext = (a: Named): Place => ({ context: a.context });
const onMachine = (a: Id): Place => ({ machine: a.id });
const onService = (a: Svc): Place => ({ service: { context: a.context, name: a.service } });

/**
 * The closed set of operations every front door turns its requests into (shellbase's `/v1`, the
 * E2B-compatible API): one entry per operation, named `noun.verb`. `Operations` (dispatch.ts)
 * runs them; `place` says which worker of a cluster serves one (routing.ts); an operation without
 * a place runs on the worker that took the request.
 */
export const OPERATIONS = {
  'context.create': op((p, c, a: { body: Arg<E['createContext'], 1> }) => p.engine.createContext(c, a.body)),
  'context.list': op((p, c, _a: Record<string, never>) => p.engine.listContexts(c)),
  'context.get': op((p, c, a: Named) => p.engine.getContext(c, a.context)),
  'context.setDefaults': op((p, c, a: Named & { defaults: Arg<E['setDefaults'], 2> }) => p.engine.setDefaults(c, a.context, a.defaults)),
  'context.delete': op((p, c, a: Named) => p.engine.deleteContext(c, a.context)),
  'context.fork': op((p, c, a: Named & { to: Arg<E['fork'], 2> }) => p.engine.fork(c, a.context, a.to)),
  'context.versions': op((p, c, a: Named & { limit: number; before?: string }) => p.engine.versions(c, a.context, a.limit, a.before)),
  'context.exec': op((p, c, a: Named & { req: Arg<E['exec'], 2>; hooks: Arg<E['exec'], 3> }) => p.engine.exec(c, a.context, a.req, a.hooks), onContext),
  'context.reset': op(async (p, c, a: Named & { version: string }) => {
    await p.engine.history.reset(c, a.context, a.version);
    return p.engine.getContext(c, a.context);
  }),
  'context.diff': op((p, c, a: Named & { range: Arg<E['history']['diff'], 2> }) => p.engine.history.diff(c, a.context, a.range)),
  'context.merge': op((p, c, a: Named & { from: string }) => p.engine.history.merge(c, a.context, a.from)),
  'context.export': op((p, c, a: Named & { opts: Arg<E['transfer']['export'], 2> }) => p.engine.transfer.export(c, a.context, a.opts)),
  'context.exportOci': op((p, c, a: Named & { opts: Arg<E['transfer']['exportOci'], 2> }) => p.engine.transfer.exportOci(c, a.context, a.opts)),
  'context.push': op((p, c, a: Named & { opts: Arg<E['transfer']['push'], 2> }) => p.engine.transfer.push(c, a.context, a.opts)),
  'server.backup': op((p, c, a: { opts: Arg<E['transfer']['backup'], 1>; progress: Arg<E['transfer']['backup'], 2> }) => p.engine.transfer.backup(c, a.opts, a.progress)),
  'volume.create': op((p, c, a: Named & { labels: Record<string, string> }) => p.engine.createVolume(c, a.context, a.labels)),
  'context.import': op((p, c, a: { body: Arg<E['transfer']['import'], 1>; opts: Arg<E['transfer']['import'], 2> }) => p.engine.transfer.import(c, a.body, a.opts)),

  'file.read': op((p, c, a: File & { version?: string }) => p.engine.files.read(c, a.context, a.path, a.version)),
  'file.stat': op((p, c, a: File & { version?: string }) => p.engine.files.stat(c, a.context, a.path, a.version)),
  'file.remove': op((p, c, a: File & { recursive: boolean }) => p.engine.files.remove(c, a.context, a.path, a.recursive)),
  'file.write': op((p, c, a: File & { body: Arg<E['files']['write'], 3>; opts: Arg<E['files']['write'], 4> }) => p.engine.files.write(c, a.context, a.path, a.body, a.opts)),
  'file.clear': op((p, c, a: Named) => p.engine.files.clear(c, a.context)),
  'file.mkdir': op((p, c, a: File & { opts: Arg<E['files']['mkdir'], 3> }) => p.engine.files.mkdir(c, a.context, a.path, a.opts)),
  'file.setAttributes': op((p, c, a: File & { change: Arg<E['files']['setAttributes'], 3> }) => p.engine.files.setAttributes(c, a.context, a.path, a.change)),
  'file.writeTar': op((p, c, a: File & { body: Arg<E['files']['writeTar'], 3>; opts: Arg<E['files']['writeTar'], 4> }) => p.engine.files.writeTar(c, a.context, a.path, a.body, a.opts)),

  'service.create': op((p, c, a: Named & { req: Arg<E['services']['create'], 2> }) => p.engine.services.create(c, a.context, a.req)),
  'service.list': op((p, c, a: Named) => p.engine.services.list(c, a.context)),
  'service.get': op((p, c, a: Svc) => p.engine.services.get(c, a.context, a.service)),
  /** The service as a port target (woken by whoever uses it): what a TCP tunnel joins. */
  'service.target': op((p, c, a: Svc) => p.engine.services.target(c, a.context, a.service)),
  'service.share': op((p, c, a: Svc & { share: unknown }) => p.engine.services.share(c, a.context, a.service, a.share)),
  'service.stop': op((p, c, a: Svc) => p.engine.services.stop(c, a.context, a.service), onService),
  'service.remove': op((p, c, a: Svc) => p.engine.services.remove(c, a.context, a.service), onService),
  'service.logs': op((p, c, a: Svc & { tail?: number }) => p.engine.services.logs(c, a.context, a.service, a.tail), onService),

  'network.get': op((p, c, a: Named) => p.engine.network.get(c, a.context)),
  'network.set': op((p, c, a: Named & { policy: Arg<E['network']['set'], 2> }) => p.engine.network.set(c, a.context, a.policy)),
  'network.log': op((p, c, a: Named & { limit: number }) => p.engine.network.log(c, a.context, a.limit)),
  /** The egress policy in force for work on a context with a policy of its own (the tenant's narrowed by both). */
  'network.effective': op((p, c, a: { context?: string; policy?: Arg<E['network']['effectiveOf'], 2> }) => p.engine.network.effectiveOf(c.tenantId, a.context, a.policy)),

  'image.pull': op((p, c, a: { req: Arg<E['images']['pull'], 1>; progress: Arg<E['images']['pull'], 2>; signal?: AbortSignal }) => p.engine.images.pull(c, a.req, a.progress, a.signal)),
  'image.import': op((p, c, a: { body: Arg<E['images']['import'], 1>; opts: Arg<E['images']['import'], 2>; progress: Arg<E['images']['import'], 3> }) => p.engine.images.import(c, a.body, a.opts, a.progress)),
  'image.list': op((p, c, _a: Record<string, never>) => p.engine.images.list(c)),
  'image.delete': op((p, c, a: { ref: string }) => p.engine.images.delete(c, a.ref)),
  'image.build': op((p, c, a: { req: Arg<E['builds']['build'], 1>; body: Arg<E['builds']['build'], 2>; report: Arg<E['builds']['build'], 3>; signal?: AbortSignal }) =>
    p.engine.builds.build(c, a.req, a.body, a.report, a.signal)),

  'tenant.create': op((p, c, a: { name: string; quotas?: Record<string, unknown>; network?: unknown }) => p.engine.tenants.create(c, a.name, a.quotas, a.network)),
  'tenant.list': op((p, c, _a: Record<string, never>) => p.engine.tenants.list(c)),
  'tenant.update': op((p, c, a: { tenant: string; change: Arg<E['tenants']['update'], 2> }) => p.engine.tenants.update(c, a.tenant, a.change)),
  'tenant.createKey': op((p, c, a: { tenant: string }) => p.engine.tenants.createKey(c, a.tenant)),
  'tenant.listKeys': op((p, c, a: { tenant: string }) => p.engine.tenants.listKeys(c, a.tenant)),
  'tenant.revoke': op((p, c, a: { tenant: string; key?: string }) => p.engine.tenants.revoke(c, a.tenant, a.key)),
  'usage.summary': op((p, c, a: { query: Arg<E['usage']['summary'], 1> }) => p.engine.usage.summary(c, a.query)),
  'store.collectGarbage': op((p, c, _a: Record<string, never>) => p.engine.collectGarbage(c)),

  'machine.create': op((p, c, a: { req: Arg<M['create'], 1>; extensions?: Record<string, unknown> }) => p.machines.create(c, a.req, a.extensions)),
  'machine.list': op((p, c, _a: Record<string, never>) => p.machines.list(c)),
  /** The caller's machines as stored (their spec and extensions: what front doors keep with a machine). */
  'machine.records': op((p, c, _a: Record<string, never>) => p.machines.rows(c.tenantId)),
  'machine.record': op((p, c, a: Id) => p.machines.rowOf(c, a.id), onMachine),
  'machine.get': op((p, c, a: Id) => p.machines.get(c, a.id), onMachine),
  'machine.pause': op((p, c, a: Id) => p.machines.pause(c, a.id), onMachine),
  'machine.resume': op((p, c, a: Id) => p.machines.resume(c, a.id), onMachine),
  'machine.hibernate': op((p, c, a: Id & { extensions?: Record<string, unknown>; memory?: boolean }) => p.machines.hibernate(c, a.id, a.extensions, a.memory), onMachine),
  'machine.stop': op((p, c, a: Id) => p.machines.stop(c, a.id), onMachine),
  'machine.remove': op((p, c, a: Id) => p.machines.remove(c, a.id), onMachine),
  'machine.console': op((p, c, a: Id & { lines: number }) => p.machines.consoleTail(c, a.id, a.lines), onMachine),
  'machine.resizeDisk': op((p, c, a: Id & { diskGb: number }) => p.machines.resizeDisk(c, a.id, a.diskGb), onMachine),
  'machine.exec': op((p, c, a: Id & { req: Arg<M['exec'], 2>; hooks: Arg<M['exec'], 3> }) => p.machines.exec(c, a.id, a.req, a.hooks), onMachine),
  'machine.readFile': op((p, c, a: Id & { path: string }) => p.machines.io.read(c, a.id, a.path), onMachine),
  'machine.writeFile': op((p, c, a: Id & { path: string; data: Buffer; mode: number }) => p.machines.io.write(c, a.id, a.path, a.data, a.mode), onMachine),
  'machine.snapshot': op((p, c, a: Id) => p.machines.snapshot(c, a.id), onMachine),
  'machine.fork': op((p, c, a: Id & { count: number }) => p.machines.fork(c, a.id, a.count), onMachine),
  'machine.expose': op((p, c, a: Id & { port: number; access?: Arg<M['expose'], 3> }) => p.machines.expose(c, a.id, a.port, a.access), onMachine),
  'machine.commit': op((p, c, a: Id & { context: string }) => p.machines.commit(c, a.id, a.context), onMachine),
  'machine.commitMount': op((p, c, a: Id & { path: string }) => p.machines.commitMount(c, a.id, a.path), onMachine),
  'machine.setNetwork': op((p, c, a: Id & { policy: unknown }) => p.machines.setNetwork(c, a.id, a.policy), onMachine),
  'machine.setExtension': op((p, c, a: Id & { name: string; value: unknown }) => p.machines.setExtension(c, a.id, a.name, a.value), onMachine),
  /** Runs `fn` with the machine's guest agent (a running machine; a stopped one is started). */
  'machine.withAgent': op((p, c, a: Id & { fn: (agent: Agent) => Promise<unknown> }) => p.machines.io.withAgent(c, a.id, a.fn), onMachine),
  'machine.pty': op((p, c, a: Id & { size: Arg<M['io']['pty'], 2>; onOutput: Arg<M['io']['pty'], 3> }) => p.machines.io.pty(c, a.id, a.size, a.onOutput), onMachine),
  /** A cell in the machine's code interpreter (guest port CODE_PORT), its events as they come. */
  // Held to the tenant's maximum time limit; the port, when this exposes it first, wants the tenant's key on the gateway.
  'machine.code': op(async (p, c, a: Id & { req: Arg<typeof runCode, 1>; hooks: Arg<typeof runCode, 2> }) => {
    if (a.req.timeoutMs !== undefined) checkTimeout('timeoutMs', a.req.timeoutMs, p.machines.io.maxTimeoutMs(c));
    return runCode(await p.machines.portTarget(c, a.id, CODE_PORT, 'key'), a.req, a.hooks);
  }, onMachine),
  /** The machine's display as a PNG, and an input to it (machines/screen.ts: the desktop image's display :0). */
  'machine.screen': op((p, c, a: Id & { opts: Arg<typeof captureScreen, 1> }) => p.machines.io.withAgent(c, a.id, (agent) => captureScreen(agent, a.opts)), onMachine),
  // Typing takes its delay per character: held, as any command's time, to the tenant's maximum.
  'machine.input': op((p, c, a: Id & { input: Arg<typeof sendInput, 1>; opts: Arg<typeof sendInput, 2> }) => {
    checkTimeout('the input\'s time (its text\'s length × delayMs, and 15 s)', inputCommand(a.input).timeoutMs, p.machines.io.maxTimeoutMs(c));
    return p.machines.io.withAgent(c, a.id, (agent) => sendInput(agent, a.input, a.opts));
  }, onMachine),
  'machine.portTarget': op((p, c, a: Id & { port: number }) => p.machines.portTarget(c, a.id, a.port), onMachine),
  'event.stream': op((p, c, a: { filter: EventFilter; after: number | null; send: Arg<Ev['stream'], 3> }) => p.events.stream(c, a.filter, a.after, a.send)),
  'event.list': op((p, c, a: { filter: EventFilter; after: number | null; limit: number }) => p.events.list(c, a.filter, a.after, a.limit)),
  /** E2B's lifecycle API: events as stored, paged by offset. */
  'event.page': op((p, c, a: { filter: EventFilter; offset: number; limit: number; ascending: boolean }) => p.events.page(c, a.filter, a.offset, a.limit, a.ascending)),
  /** An event a front door reports (E2B sandboxes' lifecycle). */
  'event.emit': op(async (p, c, a: { event: Arg<Ev['emit'], 1> }) => p.events.emit(c, a.event)),
  'webhook.create': op((p, c, a: { body: Arg<Ev['createWebhook'], 1> }) => p.events.createWebhook(c, a.body)),
  'webhook.list': op((p, c, _a: Record<string, never>) => p.events.listWebhooks(c)),
  'webhook.get': op((p, c, a: Id) => p.events.getWebhook(c, a.id)),
  'webhook.delete': op((p, c, a: Id) => p.events.deleteWebhook(c, a.id)),
  'webhook.deliveries': op((p, c, a: Id & { limit: number }) => p.events.deliveries(c, a.id, a.limit)),
  /** Webhooks in E2B's format (its `/events/webhooks`): rows as stored, for compat/e2b to show. */
  'webhook.e2bCreate': op((p, c, a: { spec: Arg<E2bHooks['create'], 1> }) => p.events.formatted('e2b').create(c, a.spec)),
  'webhook.e2bList': op((p, c, _a: Record<string, never>) => p.events.formatted('e2b').list(c)),
  'webhook.e2bGet': op((p, c, a: Id) => p.events.formatted('e2b').get(c, a.id)),
  'webhook.e2bUpdate': op((p, c, a: Id & { change: Arg<E2bHooks['update'], 2> }) => p.events.formatted('e2b').update(c, a.id, a.change)),
  'webhook.e2bDelete': op((p, c, a: Id) => p.events.formatted('e2b').delete(c, a.id)),
  'snapshot.list': op((p, c, _a: Record<string, never>) => p.machines.listSnapshots(c)),
  'snapshot.delete': op((p, c, a: Id) => p.machines.deleteSnapshot(c, a.id)),
  'snapshot.restore': op((p, c, a: Id & { count: number }) => p.machines.restore(c, a.id, a.count)),
} as const;

export type OperationKind = keyof typeof OPERATIONS;
/** What an operation of that kind is given. */
export type ArgsOf<K extends OperationKind> = Parameters<(typeof OPERATIONS)[K]['run']>[2];
/** What an operation of that kind answers. */
export type ResultOf<K extends OperationKind> = Awaited<ReturnType<(typeof OPERATIONS)[K]['run']>>;

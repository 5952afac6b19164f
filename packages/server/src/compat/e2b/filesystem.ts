import type { IncomingMessage } from 'node:http';
import { randomUUID } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { GUEST_AGENT, type Agent } from '../../machines/index.js';
import type { Attached } from '../../util/spawner.js';
import { ConnectError, timeoutOf, type ServerStream } from './connect.js';
import type { EnvdCall, Service } from './envd.js';
import { ENTRY_FIELDS, entryOf, fsError, fsOp, startAs, type GuestEntry } from './guest.js';

const FILE_TYPES = { file: 'FILE_TYPE_FILE', dir: 'FILE_TYPE_DIRECTORY', other: 'FILE_TYPE_UNSPECIFIED' } as const;
const EVENT_TYPES: Record<string, string> = { c: 'EVENT_TYPE_CREATE', w: 'EVENT_TYPE_WRITE', r: 'EVENT_TYPE_REMOVE', n: 'EVENT_TYPE_RENAME', m: 'EVENT_TYPE_CHMOD' };

function path(v: unknown, name = 'path'): string {
  if (typeof v !== 'string' || v === '' || v.includes('\0') || v.length > 4096) throw new ConnectError('invalid_argument', `${name} must be a non-empty path`);
  return v;
}

/** RFC 3339 with nanoseconds, as protobuf's JSON writes a Timestamp. */
function timestamp(t: GuestEntry['mtime']): string {
  return `${new Date(t.seconds * 1000).toISOString().slice(0, 19)}.${String(t.nanos).padStart(9, '0')}Z`;
}

/**
 * A guest entry as envd's `EntryInfo`. A symlink is typed by what it resolves to (unspecified when
 * nothing), with that resolved path as `symlinkTarget` and `L` leading its permissions, as envd does.
 */
export function entryInfo(e: GuestEntry): object {
  return {
    name: e.name, type: FILE_TYPES[e.kind], path: e.path, size: String(e.size), mode: e.mode, permissions: e.permissions,
    owner: e.owner, group: e.group, modifiedTime: timestamp(e.mtime), ...(e.target ? { symlinkTarget: e.target } : {}),
    ...(Object.keys(e.metadata).length ? { metadata: e.metadata } : {}),
  };
}

const one = async (entries: Promise<GuestEntry[]>) => {
  const [e] = await entries;
  if (!e) throw new ConnectError('internal', 'the guest returned no entry');
  return { entry: entryInfo(e) };
};

/** A watch event: its kind (native/watch.c) and name, and with entries asked for, the entry when there is one. */
interface WatchEvent { kind: string; name: string; entry?: GuestEntry }

/**
 * Parses `--watch` output (native/watch.c) as it arrives: "S" once ready, then per event its kind
 * and name and, with `entries` (-e), "e" and ENTRY_FIELDS fields, or "-".
 */
class WatchParser {
  private readonly decoder = new StringDecoder('utf8');
  private rest = '';
  private fields: string[] = [];
  private ready = false;
  constructor(private readonly entries: boolean, private readonly onReady: () => void, private readonly onEvent: (e: WatchEvent) => void) {}
  push(chunk: Buffer): void {
    const fields = (this.rest + this.decoder.write(chunk)).split('\0');
    this.rest = fields.pop() ?? '';
    for (const f of fields) {
      if (!this.ready) { if (f === 'S') { this.ready = true; this.onReady(); } continue; }
      const got = this.fields;
      got.push(f);
      if (got.length < 2 || (this.entries && (got.length < 3 || (got[2] === 'e' && got.length < 3 + ENTRY_FIELDS)))) continue;
      this.fields = [];
      this.onEvent({ kind: got[0], name: got[1], ...(got[2] === 'e' ? { entry: entryOf(got.slice(3)) } : {}) });
    }
  }
}

/** Starts a watcher process in the guest; resolves once its watches are in place. */
async function watch(agent: Agent, user: string, msg: Record<string, unknown>, onEvent: (e: object) => void): Promise<Attached> {
  const dir = path(msg.path);
  const entries = msg.includeEntry === true;
  let ready: () => void = () => undefined;
  const isReady = new Promise<void>((r) => { ready = r; });
  const err: Buffer[] = [];
  const parser = new WatchParser(entries, () => ready(), (e) => {
    if (EVENT_TYPES[e.kind]) onEvent({ name: e.name, type: EVENT_TYPES[e.kind], ...(e.entry ? { entry: entryInfo(e.entry) } : {}) });
  });
  const flags = [...(msg.recursive === true ? ['-r'] : []), ...(entries ? ['-e'] : []), ...(msg.allowNetworkMounts === true ? ['-n'] : [])];
  const p = await startAs(agent, { argv: [GUEST_AGENT, '--watch', ...flags, dir], user }, {
    onStdout: (c) => parser.push(c),
    onStderr: (c) => { err.push(Buffer.from(c)); },
  });
  const ended = p.exited.then(() => 'ended' as const, () => 'ended' as const);
  if ((await Promise.race([isReady.then(() => 'ready' as const), ended])) === 'ended') throw fsError(Buffer.concat(err).toString());
  return p;
}

async function watchDir(call: EnvdCall, msg: Record<string, unknown>, stream: ServerStream, req: IncomingMessage): Promise<void> {
  await call.withAgent(async (agent) => {
    const p = await watch(agent, call.user, msg, (event) => stream.send({ filesystem: event }));
    stream.send({ start: {} });
    const every = Number(req.headers['keepalive-ping-interval']);
    const ping = setInterval(() => stream.send({ keepalive: {} }), (every > 0 && every < 3600 ? every : 50) * 1000);
    const timeout = timeoutOf(req);
    let expired = false;
    const deadline = timeout ? setTimeout(() => { expired = true; p.kill(); }, timeout) : undefined;
    stream.onClose(() => p.kill());
    try {
      const exit = await p.exited;
      if (expired) stream.end(new ConnectError('deadline_exceeded', `the watch ran past the call's timeout of ${timeout} ms`));
      else stream.end(exit.code === 0 ? undefined : new ConnectError('not_found', 'the watched directory went away'));
    } finally {
      clearInterval(ping);
      clearTimeout(deadline);
    }
  });
}

/** Watchers polled with GetWatcherEvents: their processes in the guest, their events kept here until read. */
class Watchers {
  private readonly all = new Map<string, { sandbox: string; proc: Attached; events: object[]; error?: ConnectError }>();

  async create(call: EnvdCall, msg: Record<string, unknown>): Promise<object> {
    const id = randomUUID();
    const w = { sandbox: call.sandbox.row.id, events: [] as object[], proc: null as unknown as Attached, error: undefined as ConnectError | undefined };
    w.proc = await call.withAgent((agent) => watch(agent, call.user, msg, (e) => { if (w.events.length < 10_000) w.events.push(e); }));
    // A watcher that ended (its directory went, or its sandbox) is kept a while for its last events and its error.
    const ended = (error: ConnectError) => {
      w.error = error;
      setTimeout(() => { if (this.all.get(id) === w) this.all.delete(id); }, 600_000).unref();
    };
    void w.proc.exited.then((x) => { if (!x.detached) ended(new ConnectError('not_found', 'the watched directory went away')); },
      () => ended(new ConnectError('unavailable', 'the watcher was lost with the sandbox\'s connection')));
    this.all.set(id, w);
    return { watcherId: id };
  }

  private get(call: EnvdCall, msg: Record<string, unknown>) {
    const id = msg.watcherId;
    const w = typeof id === 'string' ? this.all.get(id) : undefined;
    if (!w || w.sandbox !== call.sandbox.row.id) throw new ConnectError('not_found', `watcher ${JSON.stringify(id)} not found`);
    return { id: id as string, w };
  }

  async events(call: EnvdCall, msg: Record<string, unknown>): Promise<object> {
    const { w } = this.get(call, msg);
    const events = w.events.splice(0);
    if (!events.length && w.error) throw w.error;
    return { events };
  }

  async remove(call: EnvdCall, msg: Record<string, unknown>): Promise<object> {
    const { id, w } = this.get(call, msg);
    w.proc.kill();
    this.all.delete(id);
    return {};
  }
}

/** envd's `filesystem.Filesystem` service: file operations run in the guest as the call's user. */
export function filesystemService(): Service {
  const watchers = new Watchers();
  const op = (args: (msg: Record<string, unknown>) => string[], makesDirs = false) => (call: EnvdCall, msg: Record<string, unknown>) =>
    call.withAgent((agent) => fsOp(agent, call.user, args(msg), undefined, makesDirs));
  return {
    streaming: { WatchDir: watchDir },
    clientStreaming: {},
    unary: {
      Stat: (call, msg) => one(op((m) => ['stat', path(m.path)])(call, msg)),
      MakeDir: (call, msg) => one(op((m) => ['mkdir', path(m.path)], true)(call, msg)),
      Move: (call, msg) => one(op((m) => ['move', path(m.source, 'source'), path(m.destination, 'destination')], true)(call, msg)),
      Remove: async (call, msg) => { await op((m) => ['remove', path(m.path)])(call, msg); return {}; },
      ListDir: async (call, msg) => {
        const depth = msg.depth ?? 1;
        if (typeof depth !== 'number' || !Number.isInteger(depth) || depth < 0 || depth > 64) throw new ConnectError('invalid_argument', 'depth must be 1 to 64');
        const entries = await op((m) => ['list', path(m.path), String(Math.max(1, depth))])(call, msg);
        return { entries: entries.map(entryInfo) };
      },
      CreateWatcher: (call, msg) => watchers.create(call, msg),
      GetWatcherEvents: (call, msg) => watchers.events(call, msg),
      RemoveWatcher: (call, msg) => watchers.remove(call, msg),
    },
  };
}

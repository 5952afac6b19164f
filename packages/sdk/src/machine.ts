import type { CreateMachineRequest, Machine, MachineConsole, MachineExecEvent, MachineExecRequest, MachineExecResult, MachineSnapshot, ServiceAccess } from '@shellbase/protocol';
import { apiKeyOf, type Transport } from './transport.js';
import { openPty, type MachinePty } from './pty.js';
import { LONG_EXEC_MS, collectExec, ndjson } from './ndjson.js';

export type MachineExecOptions = Omit<MachineExecRequest, 'command' | 'argv'> & { signal?: AbortSignal };

/** A machine (microVM) by id, as the SDK sees it. */
export class MachineHandle {
  constructor(private readonly sb: Transport, readonly id: string) {}

  private path(suffix = ''): string {
    return `/v1/machines/${encodeURIComponent(this.id)}${suffix}`;
  }

  private body(command: string | string[], options: MachineExecOptions): MachineExecRequest {
    const { signal: _s, ...rest } = options;
    return { ...rest, ...(Array.isArray(command) ? { argv: command } : { command }) };
  }

  info(): Promise<Machine> { return this.sb.json('GET', this.path()); }

  /** Runs a command in the live machine (a string for `bash -c`, or argv); wakes it if it hibernated. */
  exec(command: string | string[], options: MachineExecOptions = {}): Promise<MachineExecResult> {
    if ((options.timeoutMs ?? 0) > LONG_EXEC_MS) return collectExec(this.execStream(command, options));
    return this.sb.json('POST', this.path('/exec'), { body: this.body(command, options), signal: options.signal });
  }

  /** Runs a command and yields its output as it happens, then one `exit` event. */
  async *execStream(command: string | string[], options: MachineExecOptions = {}): AsyncGenerator<MachineExecEvent> {
    const res = await this.sb.request('POST', this.path('/exec'), { body: this.body(command, options), accept: 'application/x-ndjson', signal: options.signal });
    yield* ndjson<MachineExecEvent>(res);
  }

  /** Files of the live machine. */
  readonly files = {
    read: async (p: string): Promise<Buffer> =>
      Buffer.from(await (await this.sb.request('GET', this.path(`/files${absolute(p)}`), { accept: '*/*' })).arrayBuffer()),
    list: async (p: string): Promise<string[]> => (await this.sb.json<{ entries: string[] }>('GET', this.path(`/files${absolute(p)}`))).entries,
    write: async (p: string, data: string | Uint8Array, options: { mode?: number } = {}): Promise<void> => {
      await this.sb.request('PUT', this.path(`/files${absolute(p)}`), { raw: data, query: { mode: options.mode?.toString(8) } });
    },
  };

  /** Stops its CPUs (its memory stays); `resume` goes on. */
  pause(): Promise<Machine> { return this.sb.json('POST', this.path('/pause')); }
  resume(): Promise<Machine> { return this.sb.json('POST', this.path('/resume')); }
  /** Its memory and device state to disk and its QEMU ended now (as after its idle time); any use wakes it. */
  hibernate(): Promise<Machine> { return this.sb.json('POST', this.path('/hibernate')); }
  /** Powers it off; its disk stays (commit it into a context). */
  stop(): Promise<Machine> { return this.sb.json('POST', this.path('/stop')); }
  async remove(): Promise<void> { await this.sb.request('DELETE', this.path()); }

  /** The last `tail` lines (default 100, at most 10,000) of its serial console log; the machine is not woken. */
  console(options: { tail?: number } = {}): Promise<MachineConsole> { return this.sb.json('GET', this.path('/console'), { query: { tail: options.tail } }); }

  /**
   * An interactive terminal: root's login shell on a PTY of `cols` × `rows` (default 80 × 24), over a
   * WebSocket. Wakes a hibernated machine, and keeps it from hibernating while open.
   */
  pty(options: { cols?: number; rows?: number } = {}): Promise<MachinePty> {
    const q = new URLSearchParams();
    if (options.cols !== undefined) q.set('cols', String(options.cols));
    if (options.rows !== undefined) q.set('rows', String(options.rows));
    return openPty(this.sb.url, `${this.path('/pty')}${q.size ? `?${q}` : ''}`, apiKeyOf(this.sb));
  }

  /** Grows its disk to `diskGb` GiB and its root file system with it, online (wakes it if it hibernated). Disks never shrink. */
  resizeDisk(diskGb: number): Promise<Machine> { return this.sb.json('POST', this.path('/disk'), { body: { diskGb } }); }

  /** RAM, devices and disk frozen at one instant; restore it with `sb.machines.restore`. */
  async snapshot(): Promise<string> { return (await this.sb.json<{ snapshot: string }>('POST', this.path('/snapshot'))).snapshot; }

  /** `count` copies with this machine's memory, processes and disk at one instant; it keeps running. */
  async fork(count = 1): Promise<MachineHandle[]> {
    const r = await this.sb.json<{ machines: Machine[] }>('POST', this.path('/fork'), { body: { count } });
    return r.machines.map((m) => new MachineHandle(this.sb, m.id));
  }

  /** A gateway URL for a guest port (forks get URLs of their own). */
  /** A gateway URL for a guest port; `access: 'key'` makes the gateway want the tenant's API key too. */
  expose(port: number, opts: { access?: ServiceAccess } = {}): Promise<{ url: string; pathUrl: string; access: ServiceAccess }> {
    return this.sb.json('POST', this.path('/ports'), { body: { port, ...opts } });
  }

  /** Its disk as a new version of `context`. */
  async commit(context: string): Promise<string> { return (await this.sb.json<{ version: string }>('POST', this.path('/commit'), { body: { context } })).version; }
}

const absolute = (p: string) => (p.startsWith('/') ? p : `/${p}`).split('/').map((s) => encodeURIComponent(s)).join('/');

/** `sb.machines`: create, get, list, restore snapshots. */
export function machinesApi(sb: Transport) {
  return {
    create: async (req: CreateMachineRequest = {}): Promise<MachineHandle> => new MachineHandle(sb, (await sb.json<Machine>('POST', '/v1/machines', { body: req })).id),
    get: (id: string): MachineHandle => new MachineHandle(sb, id),
    list: async (): Promise<Machine[]> => (await sb.json<{ machines: Machine[] }>('GET', '/v1/machines')).machines,
    restore: async (snapshot: string, count = 1): Promise<MachineHandle[]> =>
      (await sb.json<{ machines: Machine[] }>('POST', `/v1/snapshots/${encodeURIComponent(snapshot)}/machines`, { body: { count } })).machines.map((m) => new MachineHandle(sb, m.id)),
    snapshots: async (): Promise<MachineSnapshot[]> => (await sb.json<{ snapshots: MachineSnapshot[] }>('GET', '/v1/snapshots')).snapshots,
    deleteSnapshot: async (id: string): Promise<void> => { await sb.request('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`); },
  };
}

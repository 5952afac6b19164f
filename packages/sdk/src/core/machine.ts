import type { Cursor, MachineInput, MouseButton, CodeEvent, CodeExecution, CodeResult, CodeError, RunCodeRequest, CreateMachineRequest, Machine, MachineConsole, MachineExecEvent, MachineExecRequest, MachineExecResult, MachineSnapshot, ServiceAccess } from '@shellbase/protocol';
import type { Transport } from './transport.js';
import { LONG_EXEC_MS, collectExec, ndjson } from './ndjson.js';

export type MachineExecOptions = Omit<MachineExecRequest, 'command' | 'argv'> & { signal?: AbortSignal };

/** Options of `runCode`: the request's, and callbacks for what the cell produces as it runs. */
export type RunCodeOptions = Omit<RunCodeRequest, 'code'> & {
  signal?: AbortSignal;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onResult?: (result: CodeResult) => void;
  onError?: (error: CodeError) => void;
};

/**
 * A machine (microVM) by id, as the SDK sees it anywhere (a browser too). Node's MachineHandle
 * (../machine.ts) extends it: files read as Buffers, and an interactive terminal.
 */
export class MachineHandle {
  constructor(protected readonly sb: Transport, readonly id: string) {}

  protected path(suffix = ''): string {
    return `/v1/machines/${encodeURIComponent(this.id)}${suffix}`;
  }

  /** A handle of this one's own class (Node's, from Node's) on another machine. */
  protected another(id: string): this {
    const Handle = this.constructor as new (sb: Transport, id: string) => this;
    return new Handle(this.sb, id);
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

  /**
   * Runs a cell in the machine's code interpreter (a machine of the `code-interpreter` image): a
   * long-lived kernel per language or context, so variables stay between calls (and in forks).
   * The code's own error is the execution's `error`, not a thrown one; callbacks see output,
   * results and the error as they come.
   */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<CodeExecution> {
    const { signal, onStdout, onStderr, onResult, onError, ...rest } = options;
    const out: CodeExecution = { results: [], stdout: [], stderr: [] };
    for await (const e of this.runCodeStream(code, { ...rest, ...(signal ? { signal } : {}) })) {
      if (e.type === 'count') out.executionCount = e.executionCount;
      else if (e.type === 'stdout') { out.stdout.push(e.data); onStdout?.(e.data); }
      else if (e.type === 'stderr') { out.stderr.push(e.data); onStderr?.(e.data); }
      else if (e.type === 'result') { out.results.push(e.result); onResult?.(e.result); }
      else if (e.type === 'exception') { out.error = e.error; onError?.(e.error); }
    }
    return out;
  }

  /** Runs a cell and yields its events as they come, ending with `end`. */
  async *runCodeStream(code: string, options: Omit<RunCodeRequest, 'code'> & { signal?: AbortSignal } = {}): AsyncGenerator<CodeEvent> {
    const { signal, ...rest } = options;
    const res = await this.sb.request('POST', this.path('/code'), { body: { code, ...rest }, accept: 'application/x-ndjson', signal });
    yield* ndjson<CodeEvent>(res);
  }

  /**
   * Its screen (display :0 of a machine of the `desktop` image) as PNG bytes, with the mouse
   * pointer drawn in unless `pointer` is false.
   */
  async screen(options: { pointer?: boolean; signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const res = await this.sb.request('GET', this.path('/screen'), { accept: 'image/png', query: { pointer: options.pointer?.toString() }, signal: options.signal });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** One input to its screen (mouse or keys); answers where the pointer is afterwards. */
  input(input: MachineInput, options: { signal?: AbortSignal } = {}): Promise<Cursor> {
    return this.sb.json('POST', this.path('/input'), { body: input, signal: options.signal });
  }

  /** Clicks at `x`,`y` (or where the pointer is): `count` 2 for a double click. */
  click(x?: number, y?: number, options: { button?: MouseButton; count?: number } = {}): Promise<Cursor> {
    return this.input({ type: 'click', ...(x !== undefined ? { x } : {}), ...(y !== undefined ? { y } : {}), ...options });
  }

  /** Types text as keystrokes. */
  type(text: string, options: { delayMs?: number } = {}): Promise<Cursor> { return this.input({ type: 'type', text, ...options }); }

  /** Presses a key or a chord of X key names: `Return`, `ctrl+l`. */
  key(key: string): Promise<Cursor> { return this.input({ type: 'key', key }); }

  /** Files of the live machine. */
  readonly files = this.fileCalls();

  protected fileCalls() {
    return {
      read: async (p: string): Promise<Uint8Array> => new Uint8Array(await (await this.readResponse(p)).arrayBuffer()),
      list: async (p: string): Promise<string[]> => (await this.sb.json<{ entries: string[] }>('GET', this.path(`/files${absolute(p)}`))).entries,
      write: async (p: string, data: string | Uint8Array | Blob, options: { mode?: number } = {}): Promise<void> => {
        await this.sb.request('PUT', this.path(`/files${absolute(p)}`), { raw: data, query: { mode: options.mode?.toString(8) } });
      },
    };
  }

  protected readResponse(p: string): Promise<Response> {
    return this.sb.request('GET', this.path(`/files${absolute(p)}`), { accept: '*/*' });
  }

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

  /** Grows its disk to `diskGb` GiB and its root file system with it, online (wakes it if it hibernated). Disks never shrink. */
  resizeDisk(diskGb: number): Promise<Machine> { return this.sb.json('POST', this.path('/disk'), { body: { diskGb } }); }

  /** RAM, devices and disk frozen at one instant; restore it with `sb.machines.restore`. */
  async snapshot(): Promise<string> { return (await this.sb.json<{ snapshot: string }>('POST', this.path('/snapshot'))).snapshot; }

  /** `count` copies with this machine's memory, processes and disk at one instant; it keeps running. */
  async fork(count = 1): Promise<this[]> {
    const r = await this.sb.json<{ machines: Machine[] }>('POST', this.path('/fork'), { body: { count } });
    return r.machines.map((m) => this.another(m.id));
  }

  /** A gateway URL for a guest port; `access: 'key'` makes the gateway want the tenant's API key too. */
  expose(port: number, opts: { access?: ServiceAccess } = {}): Promise<{ url: string; pathUrl: string; access: ServiceAccess }> {
    return this.sb.json('POST', this.path('/ports'), { body: { port, ...opts } });
  }

  /** Its disk as a new version of `context`. */
  async commit(context: string): Promise<string> { return (await this.sb.json<{ version: string }>('POST', this.path('/commit'), { body: { context } })).version; }

  /** What the machine wrote below a writable mount's path, as a new version of the mounted context; returns the version. */
  async commitMount(path: string): Promise<string> {
    return (await this.sb.json<{ version: string }>('POST', this.path(`/mounts/${encodeURIComponent(path)}/commit`))).version;
  }
}

const absolute = (p: string) => (p.startsWith('/') ? p : `/${p}`).split('/').map((s) => encodeURIComponent(s)).join('/');

/** `sb.machines`: create, get, list, restore snapshots; `handle` makes the client's kind of MachineHandle. */
export function machinesApi<H extends MachineHandle>(sb: Transport, handle: (id: string) => H) {
  return {
    create: async (req: CreateMachineRequest = {}): Promise<H> => handle((await sb.json<Machine>('POST', '/v1/machines', { body: req })).id),
    get: (id: string): H => handle(id),
    list: async (): Promise<Machine[]> => (await sb.json<{ machines: Machine[] }>('GET', '/v1/machines')).machines,
    restore: async (snapshot: string, count = 1): Promise<H[]> =>
      (await sb.json<{ machines: Machine[] }>('POST', `/v1/snapshots/${encodeURIComponent(snapshot)}/machines`, { body: { count } })).machines.map((m) => handle(m.id)),
    snapshots: async (): Promise<MachineSnapshot[]> => (await sb.json<{ snapshots: MachineSnapshot[] }>('GET', '/v1/snapshots')).snapshots,
    deleteSnapshot: async (id: string): Promise<void> => { await sb.request('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`); },
  };
}

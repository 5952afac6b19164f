import type { MachineExecRequest, MachineExecResult } from '@shellbase/protocol';
import type { ServerConfig } from '../config.js';
import { ShellbaseError, invalid } from '../errors.js';
import type { Caller } from '../core/deps.js';
import { quotasOf } from '../core/quotas.js';
import { checkCommand, checkCwd, checkEnv, checkRange, resolveLimits } from '../core/validate.js';
import { pipeThrough, type PortTarget } from '../util/pipe.js';
import type { Agent } from './vm/agent.js';
import { GuestError } from './vm/types.js';
import { ChannelClosedError, type Exit } from '../util/spawner.js';
import type { MachineRun } from './run.js';

type Running = (caller: Caller, id: string) => Promise<{ run: MachineRun; release: () => void }>;

/** An interactive shell on a terminal in a machine (`MachineIo.pty`). */
export interface PtySession {
  /** Bytes typed into the terminal. */
  input(data: Buffer): Promise<void>;
  resize(cols: number, rows: number): Promise<void>;
  /** The shell ended; rejects when the machine went away under it (stopped, hibernated, deleted). */
  exited: Promise<Exit>;
  /** Hangs up: the shell gets SIGHUP (and SIGKILL two seconds later if it is still there). */
  close(): void;
}

/** A terminal's largest size (columns and rows). */
const MAX_TERMINAL = 1000;

/** Reads larger than this go through a query of the machine's disk instead (commit, or a context read). */
const MAX_FILE_BYTES = 64 << 20;

/**
 * Commands and files of live machines, through the guest agent. A call
 * counts as use: it wakes a hibernated machine and holds off its hibernation.
 */
export class MachineIo {
  constructor(private readonly running: Running, private readonly config: ServerConfig) {}

  /** The longest time limit the tenant's commands may have (its maximum `timeoutMs`): E2B commands are held to it too. */
  maxTimeoutMs(caller: Caller): number {
    return quotasOf(this.config, caller).maximums.timeoutMs;
  }

  async exec(caller: Caller, id: string, req: MachineExecRequest, hooks: { signal?: AbortSignal; onOutput?: (s: 'stdout' | 'stderr', d: string) => void }): Promise<MachineExecResult> {
    const argv = checkCommand(req);
    // A query's defaults and the tenant's ceilings; output is capped at 1 byte or more.
    const { maximums } = quotasOf(this.config, caller);
    const { timeoutMs, outputBytes: defaultOutput } = resolveLimits(undefined, req.timeoutMs, this.config.defaults, maximums);
    const outputBytes = checkRange('limits.outputBytes', req.limits?.outputBytes ?? defaultOutput, 1, maximums.outputBytes);
    const env = checkEnv(req.env);
    const cwd = req.cwd === undefined ? '/root' : checkCwd(req.cwd);
    const { run, release } = await this.running(caller, id);
    try {
      const r = await run.agent!.exec({ argv, stdin: req.stdin, env, cwd, timeoutMs, outputBytes, signal: hooks.signal, onOutput: hooks.onOutput });
      return r.timedOut ? { ...r, limit: { name: 'timeoutMs', value: timeoutMs, max: maximums.timeoutMs } } : r;
    } catch (e) {
      throw this.lost(run, e);
    } finally {
      release();
    }
  }

  /** A file of the live machine (directories: their entries, one per line, `/` after subdirectories). */
  async read(caller: Caller, id: string, file: string): Promise<{ kind: 'file'; data: Buffer } | { kind: 'dir'; entries: string[] }> {
    const p = guestPath(file);
    const { run, release } = await this.running(caller, id);
    try {
      const r = await run.vm!.guest.read(p, MAX_FILE_BYTES);
      if (r.kind === 'missing') throw new ShellbaseError('not_found', `no file ${p} in machine ${id}`, { details: { path: p } });
      if (r.kind === 'dir') return r;
      if (r.truncated) throw new ShellbaseError('payload_too_large', `${p} is larger than ${MAX_FILE_BYTES} bytes`, { hint: 'read it in parts with exec (dd, head, tail)' });
      return { kind: 'file', data: r.data };
    } catch (e) {
      if (e instanceof GuestError) throw new ShellbaseError('failed_precondition', `reading ${p} failed: ${e.message}`, { details: { path: p } });
      throw this.lost(run, e);
    } finally {
      release();
    }
  }

  /** Writes a file of the live machine (parents made), as root, mode 0644 unless given. */
  async write(caller: Caller, id: string, file: string, data: Buffer, mode = 0o644): Promise<void> {
    const p = guestPath(file);
    if (data.length > MAX_FILE_BYTES) throw new ShellbaseError('payload_too_large', `files written into machines are at most ${MAX_FILE_BYTES} bytes`);
    const { run, release } = await this.running(caller, id);
    try {
      await run.vm!.guest.write(p, data, mode);
    } catch (e) {
      if (e instanceof GuestError) throw new ShellbaseError('failed_precondition', `writing ${p} failed: ${e.message}`, { details: { path: p } });
      throw this.lost(run, e);
    } finally {
      release();
    }
  }

  /**
   * Runs `fn` with the agent of a machine that runs (woken from hibernation if need be), counted
   * as a use until it settles: other APIs' guest operations (compat/e2b). A broken connection
   * comes back as `unavailable`; `fn`'s own errors as they are.
   */
  async withAgent<T>(caller: Caller, id: string, fn: (agent: Agent) => Promise<T>): Promise<T> {
    const { run, release } = await this.running(caller, id);
    try {
      return await fn(run.agent!);
    } catch (e) {
      throw e instanceof ChannelClosedError ? this.lost(run, e) : e;
    } finally {
      release();
    }
  }

  /**
   * Root's login shell on a terminal of `size` in a machine that runs (woken from hibernation if
   * need be). The session counts as a use until the shell ends: an open terminal keeps the
   * machine from hibernating, as an open connection to one of its ports does.
   */
  async pty(caller: Caller, id: string, size: { cols: number; rows: number }, onOutput: (chunk: Buffer) => void): Promise<PtySession> {
    checkRange('cols', size.cols, 1, MAX_TERMINAL);
    checkRange('rows', size.rows, 1, MAX_TERMINAL);
    const { run, release } = await this.running(caller, id);
    const agent = run.agent!;
    const p = agent.terminal(size, onOutput);
    let pid: number;
    try {
      pid = await p.pid;
    } catch (e) {
      release();
      throw this.lost(run, e);
    }
    const exited = p.exited.finally(release);
    exited.catch(() => undefined);
    let hungUp = false;
    return {
      input: (data) => agent.spawner.input(pid, data),
      // async: a size out of range is a rejected promise (the caller's error), never a throw out of a socket's event.
      resize: async (cols, rows) => agent.spawner.resize(pid, checkRange('cols', cols, 1, MAX_TERMINAL), checkRange('rows', rows, 1, MAX_TERMINAL)),
      exited,
      close: () => {
        if (hungUp) return;
        hungUp = true;
        void agent.spawner.signal(pid, 1).catch(() => undefined);
        const kill = setTimeout(() => p.kill(), 2000);
        kill.unref();
        void exited.then(() => clearTimeout(kill), () => clearTimeout(kill));
      },
    };
  }

  /** `elsewhere`: in a cluster, the worker that runs the machine when that is another one. */
  portTarget(run: MachineRun, port: number, elsewhere?: PortTarget['elsewhere']): PortTarget {
    const acquire = async () => {
      const release = await run.acquire();
      return { socketPath: run.portSocket(port), release };
    };
    return {
      name: `machine ${run.row.id} port ${port}`,
      // Read per request: a port's access may change while the gateway holds its target.
      get owner() { return { tenantId: run.row.tenantId, requireKey: run.row.spec.ports.some((p) => p.port === port && p.access === 'key') }; },
      acquire,
      pipe: (client, preface) => pipeThrough(acquire, client, preface),
      ...(elsewhere ? { elsewhere } : {}),
    };
  }

  /** The agent's connection broke: the machine went away under the call. */
  private lost(run: MachineRun, e: unknown): unknown {
    if (e instanceof ShellbaseError) return e;
    return new ShellbaseError('unavailable', `machine ${run.row.id}: ${(e as Error).message}`, { details: { machine: run.row.id, state: run.state }, hint: 'see its state; a stopped machine keeps its disk' });
  }
}

function guestPath(p: string): string {
  if (typeof p !== 'string' || !p.startsWith('/') || p.includes('\0') || p.length > 4096) throw invalid(`invalid path ${JSON.stringify(p)}`, 'pass an absolute path inside the machine');
  return p;
}

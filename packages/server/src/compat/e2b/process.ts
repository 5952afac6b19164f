import type { IncomingMessage } from 'node:http';
import { randomUUID } from 'node:crypto';
import { constants } from 'node:os';
import { formatDuration } from '@shellbase/protocol';
import { checkTimeout } from '../../core/validate.js';
import type { Agent } from '../../machines/index.js';
import { ChannelClosedError, SpawnerRequestError, type Attached, type Exit } from '../../util/spawner.js';
import { bytesField, ConnectError, timeoutOf, type ServerStream } from './connect.js';
import type { EnvdCall, Service } from './envd.js';
import { errnoError, startAs } from './guest.js';

/** What a started process keeps in the agent's table (its label), for List and for selecting by tag. */
interface ProcessLabel { cmd: string; args: string[]; envs: Record<string, string>; cwd?: string; tag?: string; pty?: boolean; nonce?: string }

/** A label of the agent's table as this service wrote it; null for any other (not listed). */
function labelOf(b: Buffer): ProcessLabel | null {
  try {
    const l = JSON.parse(b.toString()) as ProcessLabel;
    return typeof l === 'object' && l !== null && typeof l.cmd === 'string' && Array.isArray(l.args) ? l : null;
  } catch {
    return null;
  }
}

const SIGNALS: Record<string, number> = { SIGNAL_SIGTERM: 15, SIGNAL_SIGKILL: 9 };
/** How Go (envd) prints a signal's end: "signal: killed". */
const SIGNAL_WORDS: Partial<Record<NodeJS.Signals, string>> = {
  SIGKILL: 'killed', SIGTERM: 'terminated', SIGINT: 'interrupt', SIGHUP: 'hangup', SIGQUIT: 'quit', SIGPIPE: 'broken pipe',
  SIGSEGV: 'segmentation fault', SIGABRT: 'aborted', SIGBUS: 'bus error', SIGUSR1: 'user defined signal 1', SIGUSR2: 'user defined signal 2',
};

const obj = (v: unknown): Record<string, unknown> => (typeof v === 'object' && v !== null && !Array.isArray(v) ? v as Record<string, unknown> : {});
const str = (v: unknown, name: string): string => {
  if (typeof v !== 'string') throw new ConnectError('invalid_argument', `${name} must be a string`);
  return v;
};

function strings(v: unknown, name: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.some((a) => typeof a !== 'string')) throw new ConnectError('invalid_argument', `${name} must be a list of strings`);
  return v as string[];
}

function stringMap(v: unknown, name: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(obj(v))) out[k] = str(val, `${name}.${k}`);
  return out;
}

function ptySize(v: unknown): { cols: number; rows: number } | undefined {
  if (v === undefined) return undefined;
  const size = obj(obj(v).size);
  const cols = size.cols ?? 80;
  const rows = size.rows ?? 24;
  if (typeof cols !== 'number' || typeof rows !== 'number' || cols < 1 || rows < 1 || cols > 65535 || rows > 65535) {
    throw new ConnectError('invalid_argument', 'pty.size needs cols and rows from 1 to 65535');
  }
  return { cols, rows };
}

/** A `ProcessSelector` ({pid} or {tag}) as a pid; a tag is looked up in the agent's table. */
async function select(agent: Agent, v: unknown): Promise<number> {
  const s = obj(v);
  if (typeof s.pid === 'number' && Number.isInteger(s.pid) && s.pid > 0) return s.pid;
  if (typeof s.tag === 'string') {
    for (const p of await agent.spawner.list()) if (labelOf(p.label)?.tag === s.tag) return p.pid;
    throw new ConnectError('not_found', `no process with tag ${JSON.stringify(s.tag)}`);
  }
  throw new ConnectError('invalid_argument', 'process must select a pid or a tag');
}

/** A refused request of the agent (ESRCH: no such process; EPIPE: stdin closed) as a typed error. */
function refused(e: unknown, pid: number): unknown {
  if (!(e instanceof SpawnerRequestError)) return e;
  if (e.errno === constants.errno.ESRCH) return new ConnectError('not_found', `process ${pid} not found`);
  if (e.errno === constants.errno.EPIPE) return new ConnectError('failed_precondition', `process ${pid} has no open stdin (start it with stdin: true)`);
  if (e.errno === constants.errno.ENOTTY) return new ConnectError('failed_precondition', `process ${pid} has no terminal`);
  return errnoError(e.errno, e.message);
}

function endEvent(exit: Exit): object {
  if (exit.code !== null) {
    const status = `exit status ${exit.code}`;
    return { exitCode: exit.code, exited: true, status, ...(exit.code !== 0 ? { error: status } : {}) };
  }
  const status = `signal: ${SIGNAL_WORDS[exit.signal ?? 'SIGKILL'] ?? exit.signal?.toLowerCase()}`;
  return { exitCode: -1, exited: false, status, error: status };
}

/**
 * Streams a process's events until it ends: start (pid), data, end; keepalives at the interval the
 * client asked for. At the call's deadline a started command is killed (`kill`), whether or not its
 * client is still there, and the stream ends with deadline_exceeded; a connection to a running
 * process (Connect, no `kill`) lets go then. A client that goes away detaches.
 */
async function streamEvents(req: IncomingMessage, stream: ServerStream, open: (h: { onStdout(c: Buffer): void; onStderr(c: Buffer): void }) => Promise<Attached>, pty: boolean, kill: (() => void) | null,
  maxTimeoutMs?: number): Promise<void> {
  const data = (kind: string) => (c: Buffer) => stream.send({ event: { data: { [pty ? 'pty' : kind]: c.toString('base64') } } });
  const p = await open({ onStdout: data('stdout'), onStderr: data('stderr') });
  stream.send({ event: { start: { pid: await p.pid } } });
  const every = Number(req.headers['keepalive-ping-interval']);
  const ping = setInterval(() => stream.send({ event: { keepalive: {} } }), (every > 0 && every < 3600 ? every : 50) * 1000);
  const timeout = timeoutOf(req);
  let expired = false;
  const deadline = timeout ? setTimeout(() => { expired = true; if (kill) kill(); else p.detach(); }, timeout) : undefined;
  deadline?.unref();
  stream.onClose(() => {
    clearInterval(ping);
    if (!kill) clearTimeout(deadline);
    p.detach();
  });
  try {
    const exit = await p.exited;
    if (exit.detached) return;
    clearTimeout(deadline);
    if (expired) { stream.end(new ConnectError('deadline_exceeded', expiredMessage(timeout!, maxTimeoutMs))); return; }
    stream.send({ event: { end: endEvent(exit) } });
    stream.end();
  } finally {
    clearInterval(ping);
  }
}

/**
 * `streamEvents`, except when the machine goes away under the process (the sandbox killed, ended
 * or paused: the agent's connection closes): then the stream breaks off, as a stream from a
 * sandbox E2B ends breaks (`ServerStream.drop`).
 */
async function follow(req: IncomingMessage, stream: ServerStream, open: (h: { onStdout(c: Buffer): void; onStderr(c: Buffer): void }) => Promise<Attached>, pty: boolean, kill: (() => void) | null,
  maxTimeoutMs?: number): Promise<void> {
  try {
    await streamEvents(req, stream, open, pty, kill, maxTimeoutMs);
  } catch (e) {
    if (!(e instanceof ChannelClosedError)) throw e;
    stream.drop();
  }
}

/** What a command killed at its deadline is told: the limit, its value and (for a started command) the most it may ask for. */
function expiredMessage(timeout: number, max: number | undefined): string {
  const ran = `the process ran past the call's timeout of ${timeout} ms (${formatDuration(timeout)})`;
  if (max === undefined) return ran;
  return `${ran}, its timeoutMs; pass timeoutMs up to ${max} (${formatDuration(max)}, this tenant's maximum) to give it longer, or 0 for none`;
}

/** Kills the process started with `nonce` in its label, if it still runs (its pid may be anyone's later). */
function killer(agent: Agent, nonce: string): () => void {
  return () => {
    void (async () => {
      const p = (await agent.spawner.list()).find((x) => labelOf(x.label)?.nonce === nonce);
      if (p) await agent.spawner.signal(p.pid, 9);
    })().catch(() => undefined);
  };
}

async function start(call: EnvdCall, msg: Record<string, unknown>, stream: ServerStream, req: IncomingMessage): Promise<void> {
  const proc = obj(msg.process);
  const cmd = str(proc.cmd, 'process.cmd');
  const args = strings(proc.args, 'process.args');
  const envs = stringMap(proc.envs, 'process.envs');
  const cwd = proc.cwd === undefined ? undefined : str(proc.cwd, 'process.cwd');
  const tag = msg.tag === undefined ? undefined : str(msg.tag, 'tag');
  const pty = ptySize(msg.pty);
  const label: ProcessLabel = { cmd, args, envs, ...(cwd ? { cwd } : {}), ...(tag ? { tag } : {}), ...(pty ? { pty: true } : {}), nonce: randomUUID() };
  // A command's timeout (Connect-Timeout-Ms) is held to the tenant's maximum, as a query's; none (0) leaves it to the sandbox's lifetime.
  const timeout = timeoutOf(req);
  if (timeout !== undefined) checkTimeout('timeoutMs', timeout, call.maxTimeoutMs);
  await call.withAgent((agent) => follow(req, stream, (h) => startAs(agent, {
    argv: [cmd, ...args], user: call.user, ...(cwd ? { cwd } : {}), env: { ...call.sandbox.e2b.envs, ...envs },
    stdin: msg.stdin === true, ...(pty ? { pty } : {}), label: Buffer.from(JSON.stringify(label)),
  }, h), pty !== undefined, killer(agent, label.nonce!), call.maxTimeoutMs));
}

async function connect(call: EnvdCall, msg: Record<string, unknown>, stream: ServerStream, req: IncomingMessage): Promise<void> {
  await call.withAgent(async (agent) => {
    const pid = await select(agent, msg.process);
    const entry = (await agent.spawner.list()).find((p) => p.pid === pid);
    const pty = entry ? labelOf(entry.label)?.pty === true : false;
    await follow(req, stream, async (h) => {
      const p = agent.spawner.attach(pid, h);
      await p.pid.catch(() => { throw new ConnectError('not_found', `process ${pid} not found`); });
      return p;
    }, pty, null);
  });
}

async function list(call: EnvdCall): Promise<object> {
  return call.withAgent(async (agent) => ({
    processes: (await agent.spawner.list()).flatMap((p) => {
      const l = labelOf(p.label);
      return l ? [{ pid: p.pid, config: { cmd: l.cmd, args: l.args, envs: l.envs, ...(l.cwd ? { cwd: l.cwd } : {}) }, ...(l.tag ? { tag: l.tag } : {}) }] : [];
    }),
  }));
}

/** Unary calls on one selected process. */
const onProcess = (fn: (agent: Agent, pid: number, msg: Record<string, unknown>) => Promise<void>) =>
  (call: EnvdCall, msg: Record<string, unknown>) => call.withAgent(async (agent) => {
    const pid = await select(agent, msg.process);
    await fn(agent, pid, msg).catch((e: unknown) => { throw refused(e, pid); });
    return {};
  });

function input(msg: Record<string, unknown>): Buffer {
  const i = obj(msg.input);
  return bytesField(i.stdin ?? i.pty, 'input');
}

/** StreamInput: a start selecting the process, then data messages (keepalives ignored). */
async function streamInput(call: EnvdCall, msgs: AsyncIterable<Record<string, unknown>>): Promise<object> {
  return call.withAgent(async (agent) => {
    let pid = 0;
    for await (const m of msgs) {
      if (m.start !== undefined) pid = await select(agent, obj(m.start).process);
      else if (m.data !== undefined) {
        if (!pid) throw new ConnectError('invalid_argument', 'StreamInput needs a start message first');
        await agent.spawner.input(pid, input(obj(m.data))).catch((e: unknown) => { throw refused(e, pid); });
      }
    }
    return {};
  });
}

/** envd's `process.Process` service over the agent's process table. */
export const processService: Service = {
  streaming: { Start: start, Connect: connect },
  clientStreaming: { StreamInput: streamInput },
  unary: {
    List: (call) => list(call),
    SendInput: onProcess((agent, pid, msg) => agent.spawner.input(pid, input(msg))),
    SendSignal: onProcess((agent, pid, msg) => {
      const sig = typeof msg.signal === 'number' ? msg.signal : SIGNALS[String(msg.signal)];
      if (sig !== 9 && sig !== 15) throw new ConnectError('invalid_argument', 'signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL');
      return agent.spawner.signal(pid, sig);
    }),
    Update: onProcess((agent, pid, msg) => {
      const size = ptySize(msg.pty);
      if (!size) throw new ConnectError('invalid_argument', 'Update needs pty.size');
      return agent.spawner.resize(pid, size.cols, size.rows);
    }),
    CloseStdin: onProcess((agent, pid) => agent.spawner.closeStdin(pid)),
  },
};

import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { constants } from 'node:os';
import { StringDecoder } from 'node:string_decoder';
import type { MachineExecResult } from '@shellbase/protocol';
import { DEFAULT_PATH } from '../../runtime/index.js';
import { proxyEnv } from '../../net/proxy-env.js';
import { GUEST_PROXY } from './qemu.js';
import { Spawner, StartError, type Attached, type Exit, type OpenChannel } from '../../util/spawner.js';

/** Where the agent and its helpers live in the guest (machines/storage/disk.ts installs them). */
export const GUEST_AGENT = '/usr/lib/shellbase/sbx-spawner';
/** Every command the agent runs finds the egress proxy (a request's env may say otherwise). */
const GUEST_PROXY_ENV = proxyEnv(GUEST_PROXY);

export interface AgentExec {
  argv: string[];
  stdin?: string | Buffer;
  env?: Record<string, string>;
  cwd?: string;
  timeoutMs: number;
  outputBytes: number;
  signal?: AbortSignal;
  onOutput?: (stream: 'stdout' | 'stderr', data: string) => void;
}

/** Raw result of a guest process (bytes, for file reads). */
export interface RawResult { exitCode: number; signal?: string; timedOut: boolean; aborted: boolean; stdout: Buffer; stderr: Buffer; truncated: boolean; wallMs: number }

/**
 * The host side of the guest agent: the spawner protocol over a channel to the agent (QEMU: a TCP
 * connection through a Unix socket bridged into QEMU's network namespace, `Agent.connect`; the
 * in-memory VMs: their agent in this process). One channel per VM: a restored or forked machine
 * gets a new one, so no stream ever resumes in the middle of a frame.
 */
export class Agent {
  /** The agent's process table (frames of util/spawner.ts): starts with options, attach, input, signals, list. */
  readonly spawner: Spawner;

  /** `env`: what every command gets under its own (a machine's `guestEnv`: the host's authorities). */
  constructor(open: OpenChannel, private readonly env: Record<string, string> = {}) {
    this.spawner = new Spawner(open);
  }

  /** An agent reached through the Unix socket at `socketPath`. */
  static connect(socketPath: string, env: Record<string, string> = {}): Agent {
    const open: OpenChannel = (onData, onClose) => {
      const s = connect(socketPath);
      s.setNoDelay(true);
      s.on('data', onData);
      s.on('error', () => undefined);
      s.on('close', () => onClose('the connection to the machine\'s agent closed'));
      return { write: (f) => { s.write(f); }, ref: (on) => { if (on) s.ref(); else s.unref(); }, close: () => { s.destroy(); } };
    };
    return new Agent(open, env);
  }

  close(): void {
    this.spawner.close();
  }

  /** Runs argv in the guest (its own session; the whole group is killed on timeout or abort). */
  async run(req: AgentExec): Promise<RawResult> {
    const started = performance.now();
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const sizes = [0, 0];
    const dropping = [false, false];
    const decoders = [new StringDecoder('utf8'), new StringDecoder('utf8')];
    const names = ['stdout', 'stderr'] as const;
    const env = { PATH: DEFAULT_PATH, HOME: '/root', LANG: 'C.UTF-8', ...GUEST_PROXY_ENV, ...this.env, ...req.env };
    const cwd = req.cwd ?? '/root';
    // Up to the cap, kept (a copy: the frame's buffer is not ours to hold); with the first byte past
    // it, the guest's agent is told to stop sending that stream.
    const keep = (i: 0 | 1, chunks: Buffer[]) => (c: Buffer) => {
      const room = req.outputBytes - sizes[i];
      if (c.length > room && !dropping[i]) { dropping[i] = true; p.discard(i === 0 ? 1 : 2); }
      if (room <= 0) return;
      const piece = Buffer.from(c.subarray(0, room));
      sizes[i] += piece.length;
      chunks.push(piece);
      const text = req.onOutput ? decoders[i].write(piece) : '';
      if (text) req.onOutput!(names[i], text);
    };
    // The agent's child sets the environment and directory before its one exec; stdin bytes go
    // down a pipe once the process runs.
    const stdin = typeof req.stdin === 'string' ? Buffer.from(req.stdin) : req.stdin;
    const p = this.spawner.startWith({ argv: req.argv, cwd, env, stdin: !!stdin?.length }, { onStdout: keep(0, out), onStderr: keep(1, err) });
    // A process that ends or closes its stdin before taking it all: its exit says what happened.
    if (stdin?.length) void p.pid.then((pid) => this.feed(pid, [stdin])).catch(() => undefined);
    let timedOut = false;
    let aborted = false;
    const timer = setTimeout(() => { timedOut = true; p.kill(); }, req.timeoutMs);
    const onAbort = () => { aborted = true; p.kill(); };
    req.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const exit = await p.exited.catch((e: unknown) => {
        const { exit: code, why } = notStarted(e, req.argv[0]);
        keep(1, err)(Buffer.from(why));
        return code;
      });
      for (const i of [0, 1] as const) { const rest = req.onOutput ? decoders[i].end() : ''; if (rest) req.onOutput!(names[i], rest); }
      const truncated = dropping[0] || dropping[1];
      return {
        exitCode: exit.code ?? 128 + signalNumber(exit.signal), ...(exit.signal ? { signal: exit.signal } : {}),
        timedOut, aborted, stdout: Buffer.concat(out), stderr: Buffer.concat(err), truncated, wallMs: Math.round(performance.now() - started),
      };
    } finally {
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Writes `input` to a process's stdin pipe a piece at a time (each in the pipe before the next
   * is sent: the agent holds at most a piece), then closes it.
   */
  async feed(pid: number, input: Iterable<Buffer> | AsyncIterable<Buffer>): Promise<void> {
    const PIECE = 1 << 20;
    for await (const chunk of input) {
      for (let off = 0; off < chunk.length; off += PIECE) await this.spawner.input(pid, chunk.subarray(off, off + PIECE));
    }
    await this.spawner.closeStdin(pid);
  }

  /**
   * Root's login shell on a terminal of `size`, with the egress proxy in its environment (as an
   * exec has): what the terminal shows arrives as stdout.
   */
  terminal(size: { cols: number; rows: number }, onOutput: (chunk: Buffer) => void): Attached {
    return this.spawner.startWith({
      argv: ['/bin/sh', '-c', 'exec "${SHELL:-/bin/sh}" -l'], user: 'root',
      env: { TERM: 'xterm-256color', LANG: 'C.UTF-8', ...GUEST_PROXY_ENV, ...this.env }, pty: size,
    }, { onStdout: onOutput, onStderr: onOutput });
  }

  async exec(req: AgentExec): Promise<MachineExecResult> {
    const r = await this.run(req);
    return {
      exitCode: r.exitCode, ...(r.signal ? { signal: r.signal } : {}), timedOut: r.timedOut,
      stdout: r.stdout.toString(), stderr: r.stderr.toString(), truncated: r.truncated, usage: { wallMs: r.wallMs },
    };
  }

  /**
   * After a restore: the guest's clock to now, fresh entropy into its random pool, reseeded at
   * once. The first connection to a just-restored guest has been seen to close unanswered on a
   * loaded host (once in a bench run): settling is idempotent, so it is tried again, a few times.
   */
  async settle(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        const ns = BigInt(Date.now()) * 1_000_000n;
        const r = await this.run({ argv: [GUEST_AGENT, '--settle', String(ns)], stdin: randomBytes(64), timeoutMs: 30_000, outputBytes: 4096 });
        if (r.exitCode !== 0) throw new Error(`settling the guest failed: ${r.stderr.toString().trim()}`);
        return;
      } catch (e) {
        if (attempt >= 5 || !/connection/.test((e as Error).message)) throw e;
        await new Promise((res) => setTimeout(res, 100 * attempt));
      }
    }
  }
}

/** As shells report a command a signal ended: 128 + its number. */
function signalNumber(sig: NodeJS.Signals | null): number {
  return (sig && constants.signals[sig]) || constants.signals.SIGKILL;
}

/**
 * A command the agent could not start, as `env` reports one: 125 when its directory cannot be
 * entered, 127 when the program is not there, 126 when it cannot be run; and the line for stderr.
 */
function notStarted(e: unknown, program: string): { exit: Exit; why: string } {
  if (!(e instanceof StartError) || (e.stage !== 'cwd' && e.stage !== 'exec')) throw e;
  const code = e.stage === 'cwd' ? 125 : e.errno === constants.errno.ENOENT ? 127 : 126;
  return { exit: { code, signal: null }, why: `${program}: ${e.message}\n` };
}

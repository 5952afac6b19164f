import path from 'node:path';
import { parseScript, type Command } from '../../../runtime/memory/script.js';
import { GUEST_AGENT } from '../agent.js';
import { normalize, type Guest } from './guest.js';

/** What a command of the in-memory guest runs with. */
export interface CommandIo {
  env: Record<string, string>;
  cwd: string;
  /** All of stdin (resolves once it is closed). */
  stdin(): Promise<Buffer>;
  out(stream: 1 | 2, data: Buffer): void;
  /** Aborted when the command is signalled (its reason: the signal's number). */
  signal: AbortSignal;
  /** The guest powers off (the VM ends on its own). */
  poweroff(): void;
}

/** A command ended by a signal. */
export class Signalled extends Error {
  constructor(readonly signo: number) { super(`signal ${signo}`); }
}

class ExitNow extends Error {
  constructor(readonly code: number) { super(`exit ${code}`); }
}

/**
 * Runs `argv` in the in-memory guest: a small command set (`env`; `sh -c` and `bash -c` with the
 * in-memory runtime's script language: runtime/memory/script.ts; echo, cat, ls, mkdir, rm, test,
 * sleep, true, false, exit, pwd, printenv, date, sync, chmod; `ticker FILE [MS]` and `serve PORT
 * TEXT`, which start the guest's own processes; `systemctl is-system-running`; `poweroff`; the
 * agent's `--settle`). Returns the exit code; throws Signalled when it was signalled.
 */
export async function runCommand(guest: Guest, argv: string[], io: CommandIo): Promise<number> {
  try {
    return await exec(guest, argv, io);
  } catch (e) {
    if (e instanceof ExitNow) return e.code;
    throw e;
  }
}

async function exec(guest: Guest, argv: string[], io: CommandIo): Promise<number> {
  await guest.running();
  if (io.signal.aborted) throw new Signalled(Number(io.signal.reason) || 9);
  const [prog = '', ...args] = argv;
  const name = path.posix.basename(prog);
  const err = (msg: string) => { io.out(2, Buffer.from(`${name}: ${msg}\n`)); return 1; };
  const say = (text: string) => io.out(1, Buffer.from(text));
  const at = (p: string) => normalize(p, io.cwd);
  if (prog === GUEST_AGENT) {
    if (args[0] !== '--settle') return err('only --settle here');
    await io.stdin();
    guest.settle(Number(BigInt(args[1] ?? '0') / 1_000_000n));
    return 0;
  }
  switch (name) {
    case 'env': return envCommand(guest, args, io);
    case 'sh': case 'bash': {
      if (args[0] !== '-c') return err('only -c SCRIPT here');
      return script(guest, parseScript(args[1] ?? ''), io);
    }
    case 'exec': return exec(guest, args, io);
    case 'true': case ':': case 'sync': return 0;
    case 'false': return 1;
    case 'exit': throw new ExitNow(Number(args[0] ?? 0));
    case 'echo': say(args[0] === '-n' ? args.slice(1).join(' ') : `${args.join(' ')}\n`); return 0;
    case 'pwd': say(`${io.cwd}\n`); return 0;
    case 'printenv': {
      const v = io.env[args[0] ?? ''];
      if (v === undefined) return 1;
      say(`${v}\n`);
      return 0;
    }
    case 'date': say(args[0] === '+%s' ? `${Math.floor(guest.now() / 1000)}\n` : `${new Date(guest.now()).toISOString()}\n`); return 0;
    case 'cat': {
      const files = args.filter((a) => a !== '--');
      if (files.length === 0) { io.out(1, await io.stdin()); return 0; }
      let status = 0;
      for (const f of files) {
        const e = guest.resolve(at(f));
        if (!e) status = err(`${f}: No such file or directory`);
        else if (e.type !== 'file') status = err(`${f}: Is a directory`);
        else io.out(1, e.data);
      }
      return status;
    }
    case 'ls': {
      const dirs = args.filter((a) => !a.startsWith('-'));
      let status = 0;
      for (const d of dirs.length ? dirs : [io.cwd]) {
        const e = guest.resolve(at(d));
        if (e?.type !== 'dir') { status = err(`cannot access '${d}': No such file or directory`); continue; }
        say(guest.list(at(d)).map((x) => `${x.name}\n`).join(''));
      }
      return status;
    }
    case 'mkdir': return each(args, (p, flags) => guest.mkdir(at(p), flags.includes('p')), err);
    case 'rm': return each(args, (p, flags) => {
      const e = guest.get(at(p));
      if (!e) { if (!flags.includes('f')) throw new Error(`cannot remove '${p}': No such file or directory`); return; }
      if (e.type === 'dir' && !flags.includes('r')) throw new Error(`cannot remove '${p}': Is a directory`);
      guest.remove(at(p));
    }, err);
    case 'chmod': {
      const mode = parseInt(args[0] ?? '', 8);
      return each(args.slice(1), (p) => guest.chmod(at(p), mode), err);
    }
    case 'test': {
      const e = guest.resolve(at(args[1] ?? ''));
      return (args[0] === '-f' ? e?.type === 'file' : args[0] === '-d' ? e?.type === 'dir' : e !== null) ? 0 : 1;
    }
    case 'sleep':
      if (!(await guest.delay(Number(args[0]) * 1000, io.signal))) throw new Signalled(Number(io.signal.reason) || 9);
      return 0;
    case 'ticker':
      guest.addDaemon({ kind: 'ticker', file: at(args[0] ?? '/run/ticker'), everyMs: Number(args[1] ?? 100), value: 0 });
      return 0;
    case 'serve':
      guest.addDaemon({ kind: 'serve', port: Number(args[0]), text: args.slice(1).join(' ') });
      return 0;
    case 'systemctl':
      if (args[0] !== 'is-system-running') return err('only is-system-running here');
      say('running\n');
      return 0;
    case 'poweroff':
      io.poweroff();
      return 0;
    default:
      io.out(2, Buffer.from(`${prog}: command not found\n`));
      return 127;
  }
}

/** `env [-i] [-C DIR] [NAME=VALUE…] [COMMAND…]`. */
function envCommand(guest: Guest, args: string[], io: CommandIo): Promise<number> {
  let env = { ...io.env };
  let cwd = io.cwd;
  let i = 0;
  for (; i < args.length; i++) {
    const a = args[i]!;
    if (a === '-i') env = {};
    else if (a === '-C') cwd = normalize(args[++i] ?? '/', io.cwd);
    else if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(a)) { const eq = a.indexOf('='); env[a.slice(0, eq)] = a.slice(eq + 1); } else break;
  }
  if (guest.resolve(cwd)?.type !== 'dir') {
    io.out(2, Buffer.from(`env: cannot change directory to '${cwd}': No such file or directory\n`));
    return Promise.resolve(125);
  }
  if (i === args.length) {
    io.out(1, Buffer.from(Object.entries(env).map(([k, v]) => `${k}=${v}\n`).join('')));
    return Promise.resolve(0);
  }
  return exec(guest, args.slice(i), { ...io, env, cwd });
}

/** Commands joined by `;`, `&&` and `||`, each with its redirection. */
async function script(guest: Guest, commands: Command[], io: CommandIo): Promise<number> {
  let status = 0;
  for (let i = 0; i < commands.length; i++) {
    const prev = i === 0 ? ';' : commands[i - 1]!.op;
    if ((prev === '&&' && status !== 0) || (prev === '||' && status === 0)) continue;
    const cmd = commands[i]!;
    const r = cmd.redirect;
    if (!r) { status = await exec(guest, cmd.argv, io); continue; }
    if (r.to === 'stderr') { status = await exec(guest, cmd.argv, { ...io, out: (s, d) => io.out(2, d) }); continue; }
    const chunks: Buffer[] = [];
    status = await exec(guest, cmd.argv, { ...io, out: (s, d) => { if (s === 1) chunks.push(d); else io.out(s, d); } });
    try {
      guest.write(normalize(r.to, io.cwd), Buffer.concat(chunks), 0o644, r.append);
    } catch (e) {
      io.out(2, Buffer.from(`sh: ${(e as Error).message}\n`));
      status = 1;
    }
  }
  return status;
}

/** Runs `f` on each operand (flags like `-rf` are gathered first); a failure is reported and makes the status 1. */
function each(args: string[], f: (operand: string, flags: string) => void, err: (msg: string) => number): number {
  const flags = args.filter((a) => /^-[a-z]+$/.test(a)).map((a) => a.slice(1)).join('');
  let status = 0;
  for (const a of args.filter((x) => !/^-[a-z]+$/.test(x) && x !== '--')) {
    try { f(a, flags); } catch (e) { status = err((e as Error).message); }
  }
  return status;
}

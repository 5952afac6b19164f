import { limitMessage } from '@shellbase/sdk';
import { UsageError, durationFlag, flag, listFlag, numberFlag, type Command, type ParsedArgs } from '../args.js';
import { server } from './serve.js';
import { parseMount, sb } from './client.js';
import { networkFlag } from './policy.js';

const ID = { positionals: [1, 1] as [number, number] };

async function printExec(args: ParsedArgs, usage: string): Promise<number> {
  const abort = new AbortController();
  process.once('SIGINT', () => abort.abort());
  const m = sb().machines.get(args.positionals[0]);
  for await (const ev of m.execStream(args.rest.length === 1 ? args.rest[0] : args.rest, { timeoutMs: durationFlag(args, 'timeout', usage), signal: abort.signal })) {
    if (ev.type === 'stdout') process.stdout.write(ev.data);
    else if (ev.type === 'stderr') process.stderr.write(ev.data);
    else if (ev.type === 'exit') {
      if (ev.timedOut) console.error(`shellbase: ${limitMessage(ev.limit, '--timeout')}`);
      if (ev.truncated) console.error('shellbase: output truncated');
      return ev.exitCode;
    }
  }
  return 1;
}

/**
 * A cell in the machine's code interpreter: output as it comes, each result's text (or what kind
 * of result it is), the code's error on stderr (exit 1).
 */
async function printCode(args: ParsedArgs, usage: string): Promise<number> {
  const abort = new AbortController();
  process.once('SIGINT', () => abort.abort());
  const m = sb().machines.get(args.positionals[0]);
  const language = flag(args, 'language');
  const context = flag(args, 'context');
  const timeoutMs = durationFlag(args, 'timeout', usage);
  let failed = false;
  const events = m.runCodeStream(args.rest.join(' '), {
    ...(language !== undefined ? { language } : {}), ...(context !== undefined ? { context } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}), signal: abort.signal,
  });
  for await (const ev of events) {
    if (ev.type === 'stdout') process.stdout.write(ev.data);
    else if (ev.type === 'stderr') process.stderr.write(ev.data);
    else if (ev.type === 'result') {
      const r = ev.result;
      const kinds = Object.keys(r).filter((k) => k !== 'isMainResult' && k !== 'text');
      if (r.text !== undefined) console.log(r.text);
      else if (kinds.length) console.log(`[${kinds.join(', ')}]`);
    } else if (ev.type === 'exception') {
      failed = true;
      console.error(ev.error.traceback || `${ev.error.name}: ${ev.error.value}`);
    }
  }
  return failed ? 1 : 0;
}

/** How often `machine shell` types Ctrl-D again once its piped input has ended. */
const EOF_EVERY_MS = 500;

/** Root's shell in the machine on this terminal (raw mode while it runs); its exit code is the command's. */
async function shell(id: string): Promise<number> {
  const out = process.stdout;
  const pty = await sb().machines.get(id).pty(out.isTTY ? { cols: out.columns, rows: out.rows } : {});
  pty.onData((d) => out.write(d));
  const raw = process.stdin.isTTY;
  if (raw) process.stdin.setRawMode(true);
  let lineOpen = false;
  const typed = (d: Buffer) => { if (d.length) lineOpen = d[d.length - 1] !== 0x0a; pty.write(d); };
  const resized = () => pty.resize(out.columns, out.rows);
  // The end of piped input is the terminal's end-of-file character (Ctrl-D), as if typed at the
  // start of a line (a last line without its newline gets one first): it ends what reads the
  // terminal (the shell, and with it the session). Typed ahead of the shell's prompt, the terminal
  // may take it before the shell reads (and lose it), so it is typed again every half second
  // until the session ends.
  let eof: NodeJS.Timeout | null = null;
  const ended = () => {
    pty.write(lineOpen ? '\n\x04' : '\x04');
    eof = setInterval(() => pty.write('\x04'), EOF_EVERY_MS);
  };
  process.stdin.on('data', typed);
  if (!raw) process.stdin.once('end', ended);
  out.on('resize', resized);
  try {
    const exit = await pty.exited;
    return exit.exitCode ?? 128;
  } finally {
    process.stdin.off('data', typed);
    process.stdin.off('end', ended);
    if (eof) clearInterval(eof);
    out.off('resize', resized);
    if (raw) process.stdin.setRawMode(false);
    process.stdin.pause();
  }
}

/** `shellbase machine …`: microVMs (ids are printed one per line, for scripts). */
export const machineCommands: Command[] = [
  {
    name: 'machine create',
    spec: {
      usage: 'shellbase machine create [--context CTX [--version V] | --image debian|code-interpreter|desktop] [--memory MB] [--cpus N] [--disk-gb GB] [--idle DURATION] [--network none|public|allow:DOMAIN,…] [--mount CTX:/PATH[:ro][@VERSION]]...',
      flags: { context: 'string', version: 'string', image: 'string', memory: 'string', cpus: 'string', 'disk-gb': 'string', idle: 'string', network: 'string', mount: 'list' },
    },
    async run(args) {
      const u = this.spec.usage;
      const m = await sb().machines.create({
        context: flag(args, 'context'), version: flag(args, 'version'), image: flag(args, 'image'), memoryMb: numberFlag(args, 'memory', u),
        cpus: numberFlag(args, 'cpus', u), diskGb: numberFlag(args, 'disk-gb', u), idleTimeoutMs: durationFlag(args, 'idle', u),
        network: networkFlag(args, u), ...(args.flags.has('mount') ? { mounts: listFlag(args, 'mount').map((t) => parseMount(t, u)) } : {}),
      });
      console.log(m.id);
      return 0;
    },
  },
  {
    name: 'machine ls',
    spec: { usage: 'shellbase machine ls' },
    async run() {
      for (const m of await sb().machines.list()) {
        console.log(`${m.id}  ${m.state.padEnd(10)} ${String(m.memoryMb).padStart(5)} MiB ${String(m.diskGb).padStart(4)} GiB  ${m.context ?? m.image}  ${m.ports.map((p) => `${p.port}=${p.url}`).join(' ')}`);
      }
      return 0;
    },
  },
  {
    name: 'machine snapshots',
    spec: { usage: 'shellbase machine snapshots' },
    async run() {
      for (const s of await sb().machines.snapshots()) console.log(`${s.id}  ${s.machine}  ${s.createdAt}`);
      return 0;
    },
  },
  {
    name: 'machine exec',
    spec: { usage: 'shellbase machine exec ID [--timeout DURATION] -- CMD...', flags: { timeout: 'string' }, ...ID, rest: 'required' },
    run(args) { return printExec(args, this.spec.usage); },
  },
  {
    name: 'machine code',
    spec: {
      usage: 'shellbase machine code ID [--language LANG | --context ID] [--timeout DURATION] -- CODE',
      flags: { language: 'string', context: 'string', timeout: 'string' }, ...ID, rest: 'required',
    },
    run(args) { return printCode(args, this.spec.usage); },
  },
  {
    name: 'machine fork',
    spec: { usage: 'shellbase machine fork ID [--count N]', flags: { count: 'string' }, ...ID },
    async run(args) {
      for (const m of await sb().machines.get(args.positionals[0]).fork(numberFlag(args, 'count', this.spec.usage) ?? 1)) console.log(m.id);
      return 0;
    },
  },
  {
    name: 'machine snapshot',
    spec: { usage: 'shellbase machine snapshot ID', ...ID },
    async run(args) { console.log(await sb().machines.get(args.positionals[0]).snapshot()); return 0; },
  },
  {
    name: 'machine restore',
    spec: { usage: 'shellbase machine restore SNAPSHOT [--count N]', flags: { count: 'string' }, ...ID },
    async run(args) {
      for (const m of await sb().machines.restore(args.positionals[0], numberFlag(args, 'count', this.spec.usage) ?? 1)) console.log(m.id);
      return 0;
    },
  },
  ...(['pause', 'resume', 'hibernate', 'stop'] as const).map((verb): Command => ({
    name: `machine ${verb}`,
    spec: { usage: `shellbase machine ${verb} ID`, ...ID },
    async run(args) { console.log((await sb().machines.get(args.positionals[0])[verb]()).state); return 0; },
  })),
  {
    name: 'machine console',
    spec: { usage: 'shellbase machine console ID [--tail N]      (the end of its serial console log; default 100 lines)', flags: { tail: 'string' }, ...ID },
    async run(args) {
      for (const line of (await sb().machines.get(args.positionals[0]).console({ tail: numberFlag(args, 'tail', this.spec.usage) })).lines) console.log(line);
      return 0;
    },
  },
  {
    name: 'machine shell',
    spec: { usage: 'shellbase machine shell ID      (an interactive root shell on a terminal; exit or Ctrl+D leaves)', ...ID },
    run(args) { return shell(args.positionals[0]); },
  },
  {
    name: 'machine rm',
    spec: { usage: 'shellbase machine rm ID', ...ID },
    async run(args) { await sb().machines.get(args.positionals[0]).remove(); return 0; },
  },
  {
    name: 'machine disk',
    spec: { usage: 'shellbase machine disk ID GB      (grows its disk and root file system, online; disks never shrink)', positionals: [2, 2] },
    async run(args) {
      const [id, gb] = args.positionals;
      const n = Number(gb);
      if (gb.trim() === '' || !Number.isInteger(n)) throw new UsageError(`GB must be a whole number, not ${JSON.stringify(gb)}\n\nusage: ${this.spec.usage}`);
      console.log((await sb().machines.get(id).resizeDisk(n)).diskGb);
      return 0;
    },
  },
  {
    name: 'machine expose',
    spec: { usage: 'shellbase machine expose ID PORT [--access url|key]', flags: { access: 'string' }, positionals: [2, 2] },
    async run(args) {
      const [id, port] = args.positionals;
      const access = flag(args, 'access');
      if (access !== undefined && access !== 'url' && access !== 'key') throw new UsageError(`--access is url or key, not ${JSON.stringify(access)}\n\nusage: ${this.spec.usage}`);
      console.log((await sb().machines.get(id).expose(Number(port), access ? { access } : {})).url);
      return 0;
    },
  },
  {
    name: 'machine commit',
    spec: { usage: 'shellbase machine commit ID CTX', positionals: [2, 2] },
    async run(args) {
      const [id, ctx] = args.positionals;
      console.log(await sb().machines.get(id).commit(ctx));
      return 0;
    },
  },
  {
    name: 'machine commit-mount',
    spec: { usage: 'shellbase machine commit-mount ID PATH   (what the machine wrote below a writable mount, as a version of the mounted context)', positionals: [2, 2] },
    async run(args) {
      const [id, at] = args.positionals;
      console.log(await sb().machines.get(id).commitMount(at));
      return 0;
    },
  },
  {
    name: 'machine assets',
    spec: { usage: 'shellbase machine assets          (builds the kernel, its modules and the initramfs into the cache)' },
    async run() {
      const { buildAssets, loadConfig } = await server();
      const a = await buildAssets(loadConfig().cache, (l) => console.error(l));
      console.error(`machine assets: ${a.dir} (kernel ${a.kernel})`);
      return 0;
    },
  },
];

import { parseDuration } from '@shellbase/protocol';

/**
 * Command lines: `cmd [flags] [positionals] [-- rest...]`. Each command
 * declares what it takes (CommandSpec); anything else is a UsageError that
 * carries the command's usage, so a typo never runs something else.
 */
export interface CommandSpec {
  /** One line (or a few) of usage, shown on every mistake and by --help. */
  usage: string;
  /**
   * Flags the command takes: `string` ones need a value (`--name V` or `--name=V`), `list` ones
   * too and may repeat (their values joined by a NUL: listFlag reads them), `boolean` ones take none.
   */
  flags?: Record<string, 'string' | 'list' | 'boolean'>;
  /** One-letter flags and the long flag each stands for (`{ f: 'file' }`: `-f X` is `--file X`). */
  short?: Record<string, string>;
  /** How many positionals: [least, most] (default [0, 0]). */
  positionals?: [number, number];
  /** Whether arguments after `--` are required, allowed or refused (default refused). */
  rest?: 'required' | 'optional' | 'none';
}

export interface ParsedArgs {
  positionals: string[];
  flags: Map<string, string | true>;
  rest: string[];
}

export class UsageError extends Error {}

export function parseArgs(argv: readonly string[], spec: CommandSpec): ParsedArgs {
  const out: ParsedArgs = { positionals: [], flags: new Map(), rest: [] };
  const wrong = (why: string) => new UsageError(`${why}\n\nusage: ${spec.usage}`);
  const known = spec.flags ?? {};
  let sawRest = false;
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    if (a === '--') { out.rest = argv.slice(i + 1); sawRest = true; break; }
    if (/^-[A-Za-z]$/.test(a) && spec.short && Object.hasOwn(spec.short, a.slice(1))) a = `--${spec.short[a.slice(1)]}`;
    if (a.startsWith('--') && a.length > 2) {
      const eq = a.indexOf('=');
      const name = eq > 0 ? a.slice(2, eq) : a.slice(2);
      const kind = Object.hasOwn(known, name) ? known[name] : undefined;
      if (!kind) throw wrong(`unknown flag --${name}`);
      if (out.flags.has(name) && kind !== 'list') throw wrong(`--${name} given twice`);
      if (kind === 'boolean') {
        if (eq > 0) throw wrong(`--${name} takes no value`);
        out.flags.set(name, true);
      } else {
        if (eq < 0 && (i + 1 >= argv.length || argv[i + 1] === '--')) throw wrong(`--${name} needs a value`);
        const value = eq > 0 ? a.slice(eq + 1) : argv[++i];
        const before = out.flags.get(name);
        out.flags.set(name, kind === 'list' && typeof before === 'string' ? `${before}\0${value}` : value);
      }
    } else if (a.startsWith('-') && a.length > 1 && !/^-\d/.test(a)) {
      throw wrong(`unknown flag ${a}`);
    } else {
      out.positionals.push(a);
    }
  }
  const [least, most] = spec.positionals ?? [0, 0];
  if (out.positionals.length < least) throw wrong('missing arguments');
  if (out.positionals.length > most) throw wrong(`unexpected argument ${JSON.stringify(out.positionals[most])}`);
  const rest = spec.rest ?? 'none';
  if (rest === 'none' && sawRest) throw wrong('this command takes nothing after --');
  if (rest === 'required' && out.rest.length === 0) throw wrong('nothing to run after --');
  return out;
}

export function flag(args: ParsedArgs, name: string): string | undefined {
  const v = args.flags.get(name);
  return typeof v === 'string' ? v : undefined;
}

/** Every value of a `list` flag, in order. */
export function listFlag(args: ParsedArgs, name: string): string[] {
  const v = flag(args, name);
  return v === undefined ? [] : v.split('\0');
}

/** A numeric flag, refused unless it is a number. */
export function numberFlag(args: ParsedArgs, name: string, usage: string): number | undefined {
  const v = flag(args, name);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${name} must be a number, not ${JSON.stringify(v)}\n\nusage: ${usage}`);
  return n;
}

/** A time flag in milliseconds: `90s`, `30m`, `2h`, `1h30m`, `1500ms` or a bare number of milliseconds (protocol/durations.ts). */
export function durationFlag(args: ParsedArgs, name: string, usage: string): number | undefined {
  const v = flag(args, name);
  if (v === undefined) return undefined;
  try {
    return parseDuration(v);
  } catch (e) {
    throw new UsageError(`--${name}: ${(e as Error).message}\n\nusage: ${usage}`);
  }
}

/** A runnable command: its spec and what it does. */
export interface Command {
  /** One word, or two for a subcommand (`machine exec`). */
  name: string;
  spec: CommandSpec;
  run(args: ParsedArgs): Promise<number>;
}

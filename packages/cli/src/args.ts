/** Splits `cmd [flags] [positionals] [-- rest...]`; flags are `--name value` or `--name=value` or boolean. */
export interface ParsedArgs {
  positionals: string[];
  flags: Map<string, string | true>;
  rest: string[];
}

export function parseArgs(argv: string[], booleans: ReadonlySet<string> = new Set()): ParsedArgs {
  const out: ParsedArgs = { positionals: [], flags: new Map(), rest: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--') { out.rest = argv.slice(i + 1); break; }
    if (a.startsWith('--')) {
      const eq = a.indexOf('=');
      if (eq > 0) out.flags.set(a.slice(2, eq), a.slice(eq + 1));
      else if (booleans.has(a.slice(2)) || i + 1 >= argv.length) out.flags.set(a.slice(2), true);
      else out.flags.set(a.slice(2), argv[++i]);
    } else out.positionals.push(a);
  }
  return out;
}

export function flag(args: ParsedArgs, name: string): string | undefined {
  const v = args.flags.get(name);
  return typeof v === 'string' ? v : undefined;
}

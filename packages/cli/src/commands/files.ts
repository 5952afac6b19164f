import { createWriteStream, readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { flag, type ParsedArgs } from '../args.js';
import { UsageError, sb } from './client.js';

/** `CTX:/path` → [CTX, /path]; null for a local path. */
export function remote(spec: string): [string, string] | null {
  const m = /^([A-Za-z0-9_-][A-Za-z0-9._-]*):(\/.*)$/.exec(spec);
  return m ? [m[1], m[2]] : null;
}

function need(spec: string | undefined, usage: string): [string, string] {
  const r = spec ? remote(spec) : null;
  if (!r) throw new UsageError(usage);
  return r;
}

/** `shellbase cat CTX:/path [--version V]`: the file's bytes on stdout. */
export async function cat(args: ParsedArgs): Promise<number> {
  await download(need(args.positionals[0], 'shellbase cat CTX:/path [--version V]'), '-', flag(args, 'version'));
  return 0;
}

/** Streams a context's file to a local path (`-`: stdout). */
async function download([ctx, path]: [string, string], to: string, version?: string): Promise<void> {
  const res = await sb().context(ctx).files.open(path, { version });
  await pipeline(Readable.fromWeb(res.body as never), to === '-' ? process.stdout : createWriteStream(to));
}

/** `shellbase ls CTX:/dir [--version V]` */
export async function ls(args: ParsedArgs): Promise<number> {
  const [ctx, path] = need(args.positionals[0], 'shellbase ls CTX:/dir [--version V]');
  for (const e of await sb().context(ctx).files.list(path, { version: flag(args, 'version') })) {
    const kind = e.type === 'dir' ? 'd' : e.type === 'symlink' ? 'l' : e.type === 'file' ? '-' : '?';
    console.log(`${kind}${e.mode.toString(8).padStart(4, '0')} ${String(e.size).padStart(10)} ${e.mtime} ${e.name}`);
  }
  return 0;
}

/** `shellbase cp LOCAL CTX:/path` or `shellbase cp CTX:/path LOCAL` (`-` is stdin or stdout). */
export async function cp(args: ParsedArgs): Promise<number> {
  const [from, to] = args.positionals;
  const usage = 'shellbase cp LOCAL CTX:/path | shellbase cp CTX:/path LOCAL';
  if (!from || !to) throw new UsageError(usage);
  const src = remote(from);
  const dst = remote(to);
  if (src && !dst) {
    await download(src, to, flag(args, 'version'));
    return 0;
  }
  if (dst && !src) {
    const data = from === '-' ? await readAll(process.stdin) : readFileSync(from);
    const mode = flag(args, 'mode');
    const r = await sb().context(dst[0]).files.write(dst[1], data, mode ? { mode: parseInt(mode, 8) } : {});
    console.error(`version ${r.version}`);
    return 0;
  }
  throw new UsageError(usage);
}

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

/** `shellbase diff CTX [FROM] [TO] [--path P]` */
export async function diff(args: ParsedArgs): Promise<number> {
  const [ctx, from, to] = args.positionals;
  if (!ctx) throw new UsageError('shellbase diff CTX [FROM] [TO] [--path /file]');
  const r = await sb().context(ctx).diff({ from, to, path: flag(args, 'path') });
  if (r.patch !== undefined) { process.stdout.write(r.patch); return 0; }
  const sign = { added: '+', modified: '~', deleted: '-' } as const;
  for (const c of r.changes) console.log(`${sign[c.kind]} ${c.path}${c.type === 'file' ? '' : ` (${c.type})`}`);
  return 0;
}

/** `shellbase merge FROM INTO` */
export async function merge(args: ParsedArgs): Promise<number> {
  const [from, into] = args.positionals;
  if (!from || !into) throw new UsageError('shellbase merge FROM INTO');
  console.log((await sb().context(into).merge(from)).version);
  return 0;
}

/** `shellbase reset CTX VERSION` */
export async function reset(args: ParsedArgs): Promise<number> {
  const [ctx, version] = args.positionals;
  if (!ctx || !version) throw new UsageError('shellbase reset CTX VERSION');
  console.log((await sb().context(ctx).reset(version)).head);
  return 0;
}


import { createWriteStream, readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { flag, UsageError, type Command } from '../args.js';
import { sb } from './client.js';

/** `CTX:/path` → [CTX, /path]; null for a local path. */
export function remote(spec: string): [string, string] | null {
  const m = /^([A-Za-z0-9_-][A-Za-z0-9._-]*):(\/.*)$/.exec(spec);
  return m ? [m[1], m[2]] : null;
}

function need(spec: string, usage: string): [string, string] {
  const r = remote(spec);
  if (!r) throw new UsageError(`${JSON.stringify(spec)} is not CTX:/path\n\nusage: ${usage}`);
  return r;
}

/** Streams a context's file to a local path (`-`: stdout). */
async function download([ctx, path]: [string, string], to: string, version?: string): Promise<void> {
  const res = await sb().context(ctx).files.open(path, { version });
  await pipeline(Readable.fromWeb(res.body as never), to === '-' ? process.stdout : createWriteStream(to));
}

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

const CP = 'shellbase cp LOCAL CTX:/path [--mode 0644]  |  shellbase cp CTX:/path LOCAL [--version V]   (- is stdin or stdout)';

/** Files straight from the layer store, diff, merge and reset. */
export const fileCommands: Command[] = [
  {
    name: 'cat',
    spec: { usage: 'shellbase cat CTX:/path [--version V]', flags: { version: 'string' }, positionals: [1, 1] },
    async run(args) {
      await download(need(args.positionals[0], this.spec.usage), '-', flag(args, 'version'));
      return 0;
    },
  },
  {
    name: 'ls',
    spec: { usage: 'shellbase ls CTX:/dir [--version V]', flags: { version: 'string' }, positionals: [1, 1] },
    async run(args) {
      const [ctx, path] = need(args.positionals[0], this.spec.usage);
      for (const e of await sb().context(ctx).files.list(path, { version: flag(args, 'version') })) {
        const kind = e.type === 'dir' ? 'd' : e.type === 'symlink' ? 'l' : e.type === 'file' ? '-' : '?';
        console.log(`${kind}${e.mode.toString(8).padStart(4, '0')} ${String(e.size).padStart(10)} ${e.mtime} ${e.name}`);
      }
      return 0;
    },
  },
  {
    name: 'cp',
    spec: { usage: CP, flags: { mode: 'string', version: 'string' }, positionals: [2, 2] },
    async run(args) {
      const [from, to] = args.positionals;
      const src = remote(from);
      const dst = remote(to);
      if (src && !dst) {
        if (args.flags.has('mode')) throw new UsageError(`--mode is for uploads\n\nusage: ${CP}`);
        await download(src, to, flag(args, 'version'));
        return 0;
      }
      if (dst && !src) {
        if (args.flags.has('version')) throw new UsageError(`--version is for downloads (a write goes on the head)\n\nusage: ${CP}`);
        const mode = flag(args, 'mode');
        if (mode !== undefined && !/^0?[0-7]{3,4}$/.test(mode)) throw new UsageError(`--mode must be octal, such as 0644\n\nusage: ${CP}`);
        const data = from === '-' ? await readAll(process.stdin) : readFileSync(from);
        const r = await sb().context(dst[0]).files.write(dst[1], data, mode ? { mode: parseInt(mode, 8) } : {});
        console.error(`version ${r.version}`);
        return 0;
      }
      throw new UsageError(`one side must be CTX:/path and the other a local path\n\nusage: ${CP}`);
    },
  },
  {
    name: 'diff',
    spec: { usage: 'shellbase diff CTX [FROM] [TO] [--path /file]', flags: { path: 'string' }, positionals: [1, 3] },
    async run(args) {
      const [ctx, from, to] = args.positionals;
      const r = await sb().context(ctx).diff({ from, to, path: flag(args, 'path') });
      if (r.patch !== undefined) { process.stdout.write(r.patch); return 0; }
      const sign = { added: '+', modified: '~', deleted: '-' } as const;
      for (const c of r.changes) console.log(`${sign[c.kind]} ${c.path}${c.type === 'file' ? '' : ` (${c.type})`}`);
      return 0;
    },
  },
  {
    name: 'merge',
    spec: { usage: 'shellbase merge FROM INTO', positionals: [2, 2] },
    async run(args) {
      const [from, into] = args.positionals;
      console.log((await sb().context(into).merge(from)).version);
      return 0;
    },
  },
  {
    name: 'reset',
    spec: { usage: 'shellbase reset CTX VERSION', positionals: [2, 2] },
    async run(args) {
      const [ctx, version] = args.positionals;
      console.log((await sb().context(ctx).reset(version)).head);
      return 0;
    },
  },
];

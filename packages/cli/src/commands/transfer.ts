import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebStream } from 'node:stream/web';
import { flag, UsageError, type Command } from '../args.js';
import { sb } from './client.js';
import { EXPORT_OCI, exportOci } from './export-oci.js';

const EXPORT = 'shellbase export CTX -o FILE [--version V | --history]   (a context archive: docs/formats.md)';
const IMPORT = 'shellbase import FILE [--as NAME]   (a new context from an archive, with its version ids)';

/** Contexts as archives: export one to a file, import one from a file. */
export const transferCommands: Command[] = [
  {
    name: 'export',
    spec: {
      usage: `${EXPORT}\n       ${EXPORT_OCI}`,
      flags: { output: 'string', version: 'string', history: 'boolean', oci: 'string', tag: 'string', username: 'string', 'password-stdin': 'boolean', insecure: 'boolean' },
      short: { o: 'output' }, positionals: [1, 1],
    },
    async run(args) {
      const out = flag(args, 'output');
      if (out && args.flags.has('oci')) throw new UsageError(`pass -o FILE or --oci DIR|REF, not both\n\nusage: ${EXPORT}\n       ${EXPORT_OCI}`);
      if (args.flags.has('oci')) return exportOci(args);
      if (!out) throw new UsageError(`-o FILE (or --oci DIR|REF) is required\n\nusage: ${EXPORT}\n       ${EXPORT_OCI}`);
      if (args.flags.has('version') && args.flags.has('history')) throw new UsageError(`pass --version or --history, not both\n\nusage: ${EXPORT}`);
      const body = await sb().contexts.export(args.positionals[0], { version: flag(args, 'version'), history: args.flags.has('history') });
      try {
        await pipeline(Readable.fromWeb(body as WebStream<Uint8Array>), createWriteStream(out));
      } catch (e) {
        await rm(out, { force: true });
        throw e;
      }
      return 0;
    },
  },
  {
    name: 'import',
    spec: { usage: IMPORT, flags: { as: 'string' }, positionals: [1, 1] },
    async run(args) {
      const file = args.positionals[0];
      if (!existsSync(file)) throw new UsageError(`${file} does not exist\n\nusage: ${IMPORT}`);
      const ctx = await sb().contexts.import(createReadStream(file), { as: flag(args, 'as') });
      console.log(`${ctx.name} ${ctx.head}`);
      return 0;
    },
  },
];

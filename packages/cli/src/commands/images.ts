import { createReadStream, existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { contextOf, tarDirectory, type ContextDefaults, type ImageProgress } from '@shellbase/sdk';
import { flag, listFlag, UsageError, type Command } from '../args.js';
import { sb } from './client.js';

const BUILD = 'shellbase build [-f DOCKERFILE] --tag NAME [--no-cache] [--build-arg K=V]... DIR';
const DEFAULTS = 'shellbase defaults CTX [--env K=V]... [--cwd DIR] [--user USER] [--clear]';

const showProgress = (p: ImageProgress) => console.error(p.message);

const mib = (n: number) => `${(n / (1 << 20)).toFixed(1)} MiB`;

/** `K=V` words as a map (a word without `=` is a usage error). */
function pairs(words: string[], what: string, usage: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const w of words) {
    const eq = w.indexOf('=');
    if (eq <= 0) throw new UsageError(`${what} takes NAME=VALUE, not ${JSON.stringify(w)}\n\nusage: ${usage}`);
    out[w.slice(0, eq)] = w.slice(eq + 1);
  }
  return out;
}

/** OCI images (pull, import, list, delete), Dockerfile builds and context defaults. */
export const imageCommands: Command[] = [
  {
    name: 'image pull',
    spec: { usage: 'shellbase image pull REF [--insecure]   (e.g. docker.io/library/python:3.12-slim)', flags: { insecure: 'boolean' }, positionals: [1, 1] },
    async run(args) {
      const img = await sb().images.pull(args.positionals[0], { insecure: args.flags.has('insecure'), onProgress: showProgress });
      console.log(`${img.ref} ${img.digest} (${img.layers} layers, ${mib(img.bytes)})`);
      return 0;
    },
  },
  {
    name: 'image import',
    spec: { usage: 'shellbase image import FILE|DIR [--ref REF]   (a docker save tar, an OCI layout tar or directory)', flags: { ref: 'string' }, positionals: [1, 1] },
    async run(args) {
      const file = args.positionals[0];
      if (!existsSync(file)) throw new UsageError(`${file} does not exist\n\nusage: ${this.spec.usage}`);
      const body = statSync(file).isDirectory() ? tarDirectory(file) : createReadStream(file);
      const images = await sb().images.import(body, { ref: flag(args, 'ref'), onProgress: showProgress });
      for (const img of images) console.log(`${img.ref} ${img.digest} (${img.layers} layers, ${mib(img.bytes)})`);
      return 0;
    },
  },
  {
    name: 'image ls',
    spec: { usage: 'shellbase image ls' },
    async run() {
      for (const img of await sb().images.list()) {
        console.log(`${img.ref.padEnd(60)} ${img.digest.slice(0, 19)}  ${String(img.layers).padStart(3)} layers  ${mib(img.bytes).padStart(10)}  ${img.createdAt}`);
      }
      return 0;
    },
  },
  {
    name: 'image rm',
    spec: { usage: 'shellbase image rm REF   (contexts made of it keep their files)', positionals: [1, 1] },
    async run(args) {
      await sb().images.delete(args.positionals[0]);
      return 0;
    },
  },
  {
    name: 'build',
    spec: {
      usage: BUILD, flags: { file: 'string', tag: 'string', 'no-cache': 'boolean', 'build-arg': 'list' }, short: { f: 'file', t: 'tag' }, positionals: [1, 1],
    },
    async run(args) {
      const dir = args.positionals[0];
      const tag = flag(args, 'tag');
      if (!tag) throw new UsageError(`--tag NAME is required (the context the build makes)\n\nusage: ${BUILD}`);
      if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new UsageError(`${dir} is not a directory\n\nusage: ${BUILD}`);
      // -f names a file (as docker build's): relative to the working directory, and inside DIR.
      const file = flag(args, 'file');
      const dockerfile = file === undefined ? 'Dockerfile' : path.relative(dir, path.resolve(file)).split(path.sep).join('/');
      if (dockerfile.startsWith('..')) throw new UsageError(`the Dockerfile must be inside ${dir}\n\nusage: ${BUILD}`);
      const abort = new AbortController();
      process.once('SIGINT', () => abort.abort());
      const result = await sb().build({
        context: contextOf(dir, dockerfile), tag, dockerfile, noCache: args.flags.has('no-cache'),
        buildArgs: pairs(listFlag(args, 'build-arg'), '--build-arg', BUILD), signal: abort.signal,
        onEvent: (e) => {
          if (e.type === 'step') console.error(`#${e.index + 1}/${e.total} ${e.instruction}`);
          else if (e.type === 'stepDone') console.error(`   ${e.cached ? 'CACHED' : `done in ${e.ms} ms`}`);
          else if (e.type === 'stdout') process.stderr.write(e.data);
          else if (e.type === 'stderr') process.stderr.write(e.data);
        },
      });
      console.log(`${result.context} ${result.version}`);
      return 0;
    },
  },
  {
    name: 'create',
    spec: { usage: 'shellbase create CTX [--image REF | --empty]   (a context of a pulled image, default debian; --empty: an empty tree, a volume)', flags: { image: 'string', empty: 'boolean' }, positionals: [1, 1] },
    async run(args) {
      const image = flag(args, 'image');
      const c = await sb().contexts.create({ name: args.positionals[0], ...(image ? { image } : {}), ...(args.flags.has('empty') ? { empty: true } : {}) });
      console.log(`${c.name} ${c.head} (${c.image})`);
      return 0;
    },
  },
  {
    name: 'defaults',
    spec: { usage: DEFAULTS, flags: { env: 'list', cwd: 'string', user: 'string', clear: 'boolean' }, positionals: [1, 1] },
    async run(args) {
      const handle = sb().context(args.positionals[0]);
      const changing = args.flags.has('env') || args.flags.has('cwd') || args.flags.has('user');
      if (changing && args.flags.has('clear')) throw new UsageError(`give defaults or --clear, not both\n\nusage: ${DEFAULTS}`);
      let defaults = (await handle.info()).defaults ?? {};
      if (args.flags.has('clear')) defaults = {};
      if (changing) {
        const env = pairs(listFlag(args, 'env'), '--env', DEFAULTS);
        const next: ContextDefaults = { ...defaults, ...(Object.keys(env).length ? { env: { ...(defaults.env ?? {}), ...env } } : {}) };
        if (flag(args, 'cwd') !== undefined) next.cwd = flag(args, 'cwd');
        if (flag(args, 'user') !== undefined) next.user = flag(args, 'user');
        defaults = next;
      }
      if (changing || args.flags.has('clear')) defaults = (await handle.setDefaults(defaults)).defaults ?? {};
      for (const [k, v] of Object.entries(defaults.env ?? {})) console.log(`env  ${k}=${v}`);
      if (defaults.cwd) console.log(`cwd  ${defaults.cwd}`);
      if (defaults.user) console.log(`user ${defaults.user}`);
      return 0;
    },
  },
];

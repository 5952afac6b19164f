import { Shellbase, limitMessage, type Mount } from '@shellbase/sdk';
import { durationFlag, flag, listFlag, numberFlag, UsageError, type Command } from '../args.js';
import { networkFlag } from './policy.js';

/** A client from SHELLBASE_URL and SHELLBASE_API_KEY (or the admin key of a server on this host). */
export const sb = () => new Shellbase();

const EXEC = 'shellbase exec CTX [--version V] [--timeout DURATION] [--commit always|on-success|never] [--network none|public|allow:DOMAIN,…] [--mount CTX:/PATH[:ro][@VERSION]]... -- CMD...';
const COMMIT_MODES = ['always', 'on-success', 'never'];

/** `--mount data:/mnt/data[:ro][@VERSION]`: another context shown at a path (read-only with `:ro`, at a version with `@`). */
export function parseMount(text: string, usage: string): Mount {
  const m = /^([^:@/]+):(\/[^@]*?)(:ro|:rw)?(?:@([^@:/]+))?$/.exec(text);
  if (!m) throw new UsageError(`--mount takes CTX:/PATH[:ro][@VERSION], not ${JSON.stringify(text)}\n\nusage: ${usage}`);
  return { context: m[1], path: m[2], ...(m[3] === ':ro' ? { readOnly: true } : {}), ...(m[4] ? { version: m[4] } : {}) };
}

/** Queries, contexts, history listings, tenants, keys, usage and collection: the client commands. */
export const clientCommands: Command[] = [
  {
    name: 'exec',
    spec: { usage: EXEC, flags: { version: 'string', timeout: 'string', commit: 'string', network: 'string', mount: 'list' }, positionals: [1, 1], rest: 'required' },
    async run(args) {
      const [ctx] = args.positionals;
      const commit = flag(args, 'commit');
      if (commit !== undefined && !COMMIT_MODES.includes(commit)) throw new UsageError(`--commit must be one of ${COMMIT_MODES.join(', ')}\n\nusage: ${EXEC}`);
      const abort = new AbortController();
      process.once('SIGINT', () => abort.abort());
      const command = args.rest.length === 1 ? args.rest[0] : args.rest;
      for await (const ev of sb().context(ctx).execStream(command, {
        version: flag(args, 'version'),
        commit: commit as 'always' | 'on-success' | 'never' | undefined,
        timeoutMs: durationFlag(args, 'timeout', EXEC),
        network: networkFlag(args, EXEC),
        ...(args.flags.has('mount') ? { mounts: listFlag(args, 'mount').map((t) => parseMount(t, EXEC)) } : {}),
        signal: abort.signal,
      })) {
        if (ev.type === 'stdout') process.stdout.write(ev.data);
        else if (ev.type === 'stderr') process.stderr.write(ev.data);
        else if (ev.type === 'exit') {
          if (ev.timedOut) console.error(`shellbase: ${limitMessage(ev.limit, '--timeout')}`);
          if (ev.oomKilled) console.error('shellbase: killed: out of memory');
          if (ev.truncated) console.error('shellbase: output truncated');
          if (ev.conflict) console.error(`shellbase: conflict on ${ev.conflict.paths.join(', ')}; work kept as version ${ev.conflict.version}`);
          if (process.env.SHELLBASE_VERBOSE) {
            console.error(`version ${ev.version}${ev.committed ? ' (committed)' : ''}`);
            for (const m of ev.mounts ?? []) console.error(`mount ${m.context} at ${m.path}: version ${m.version}${m.committed ? ' (committed)' : ''}`);
          }
          return ev.exitCode;
        }
      }
      return 1;
    },
  },
  {
    name: 'contexts',
    spec: { usage: 'shellbase contexts' },
    async run() {
      for (const c of await sb().contexts.list()) console.log(`${c.name.padEnd(30)} ${c.head}  ${c.updatedAt}`);
      return 0;
    },
  },
  {
    name: 'log',
    spec: { usage: 'shellbase log CTX [--limit N]', flags: { limit: 'string' }, positionals: [1, 1] },
    async run(args) {
      const limit = numberFlag(args, 'limit', this.spec.usage);
      for (const v of await sb().context(args.positionals[0]).versions({ limit })) {
        console.log(`${v.id}  ${v.createdAt}  ${v.cause.kind.padEnd(5)}  ${String(v.bytes).padStart(10)}  ${v.cause.command ?? ''}`);
      }
      return 0;
    },
  },
  {
    name: 'fork',
    spec: { usage: 'shellbase fork CTX NEW [--version V]', flags: { version: 'string' }, positionals: [2, 2] },
    async run(args) {
      const [ctx, name] = args.positionals;
      await sb().context(ctx).fork(name, { version: flag(args, 'version') });
      console.log(name);
      return 0;
    },
  },
  {
    name: 'tenant create',
    spec: { usage: 'shellbase tenant create NAME        (admin key; prints the new API key once)', positionals: [1, 1] },
    async run(args) {
      const r = await sb().tenants.create(args.positionals[0]);
      console.error(`tenant ${r.tenant.name} (${r.tenant.id}); its API key, shown only now:`);
      console.log(r.apiKey);
      return 0;
    },
  },
  {
    name: 'tenant ls',
    spec: { usage: 'shellbase tenant ls                 (admin key)' },
    async run() {
      for (const t of await sb().tenants.list()) console.log(`${t.name.padEnd(30)} ${t.id}${t.admin ? '  admin' : ''}  ${t.createdAt}`);
      return 0;
    },
  },
  {
    name: 'tenant revoke',
    spec: { usage: 'shellbase tenant revoke NAME        (admin key; revokes every key, keeps the data)', positionals: [1, 1] },
    async run(args) { await sb().tenants.revoke(args.positionals[0]); return 0; },
  },
  {
    name: 'key create',
    spec: { usage: 'shellbase key create TENANT          (admin key; prints the new API key once)', positionals: [1, 1] },
    async run(args) {
      const [name] = args.positionals;
      const r = await sb().tenants.createKey(name);
      console.error(`key ${r.key.id} for ${name}, shown only now:`);
      console.log(r.apiKey);
      return 0;
    },
  },
  {
    name: 'key ls',
    spec: { usage: 'shellbase key ls TENANT              (admin key)', positionals: [1, 1] },
    async run(args) {
      for (const k of await sb().tenants.listKeys(args.positionals[0])) console.log(`${k.id}  ${k.createdAt}  ${k.revokedAt ? `revoked ${k.revokedAt}` : 'active'}`);
      return 0;
    },
  },
  {
    name: 'key revoke',
    spec: { usage: 'shellbase key revoke TENANT KEY_ID   (admin key)', positionals: [2, 2] },
    async run(args) { await sb().tenants.revokeKey(args.positionals[0], args.positionals[1]); return 0; },
  },
  {
    name: 'usage',
    spec: {
      usage: 'shellbase usage [--from T] [--to T] [--group-by context|kind] [--tenant NAME]',
      flags: { from: 'string', to: 'string', 'group-by': 'string', tenant: 'string' },
    },
    async run(args) {
      const groupBy = flag(args, 'group-by');
      if (groupBy !== undefined && groupBy !== 'context' && groupBy !== 'kind') throw new UsageError(`--group-by must be context or kind\n\nusage: ${this.spec.usage}`);
      const r = await sb().usage({ from: flag(args, 'from'), to: flag(args, 'to'), groupBy, tenant: flag(args, 'tenant') });
      const row = (i: { key: string; queries: number; cpuMs: number; wallMs: number; bytesStored: number }) =>
        `${i.key.padEnd(30)} ${String(i.queries).padStart(8)} ${String(i.cpuMs).padStart(10)} ${String(i.wallMs).padStart(10)} ${String(i.bytesStored).padStart(14)}`;
      console.log(`${(groupBy ?? 'context').padEnd(30)} ${'queries'.padStart(8)} ${'cpu ms'.padStart(10)} ${'wall ms'.padStart(10)} ${'bytes stored'.padStart(14)}`);
      for (const i of r.items) console.log(row(i));
      console.log(row(r.total));
      return 0;
    },
  },
  {
    name: 'gc',
    spec: { usage: 'shellbase gc                         (admin key: one garbage collection now)' },
    async run() {
      const r = await sb().gc();
      console.log(`dropped ${r.versionsDropped} versions, deleted ${r.layersDeleted} layers (${r.bytesFreed} bytes) in ${r.ms} ms` +
        (r.templatesDeleted ? `, deleted ${r.templatesDeleted} machine templates` : '') +
        (r.deferredLayers ? `; ${r.deferredLayers} layers wait for running work` : ''));
      return 0;
    },
  },
];

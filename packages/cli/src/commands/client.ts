import { Shellbase } from '@shellbase/sdk';
import { flag, type ParsedArgs } from '../args.js';

/** A client from SHELLBASE_URL and SHELLBASE_API_KEY (or the admin key of a server on this host). */
export const sb = () => new Shellbase();

export function need(args: ParsedArgs, n: number, usage: string): string[] {
  if (args.positionals.length < n) throw new UsageError(usage);
  return args.positionals;
}

export class UsageError extends Error {}

/** `shellbase exec CTX [--version V] [--timeout MS] [--commit MODE] -- CMD...`: streams, exits with the command's code. */
export async function exec(args: ParsedArgs): Promise<number> {
  const [ctx] = need(args, 1, 'shellbase exec CTX [--version V] [--timeout MS] -- CMD...');
  if (args.rest.length === 0) throw new UsageError('shellbase exec CTX -- CMD...: nothing to run');
  const timeout = flag(args, 'timeout');
  const abort = new AbortController();
  process.once('SIGINT', () => abort.abort());
  const command = args.rest.length === 1 ? args.rest[0] : args.rest;
  for await (const ev of sb().context(ctx).execStream(command, {
    version: flag(args, 'version'),
    commit: flag(args, 'commit') as 'always' | 'on-success' | 'never' | undefined,
    timeoutMs: timeout ? Number(timeout) : undefined,
    signal: abort.signal,
  })) {
    if (ev.type === 'stdout') process.stdout.write(ev.data);
    else if (ev.type === 'stderr') process.stderr.write(ev.data);
    else if (ev.type === 'exit') {
      if (ev.timedOut) console.error('shellbase: timed out');
      if (ev.oomKilled) console.error('shellbase: killed: out of memory');
      if (ev.truncated) console.error('shellbase: output truncated');
      if (ev.conflict) console.error(`shellbase: conflict on ${ev.conflict.paths.join(', ')}; work kept as version ${ev.conflict.version}`);
      if (process.env.SHELLBASE_VERBOSE) console.error(`version ${ev.version}${ev.committed ? ' (committed)' : ''}`);
      return ev.exitCode;
    }
  }
  return 1;
}

export async function contexts(): Promise<number> {
  const list = await sb().contexts.list();
  for (const c of list) console.log(`${c.name.padEnd(30)} ${c.head}  ${c.updatedAt}`);
  return 0;
}

/** `shellbase log CTX [--limit N]`: versions, newest first. */
export async function log(args: ParsedArgs): Promise<number> {
  const [ctx] = need(args, 1, 'shellbase log CTX [--limit N]');
  const limit = flag(args, 'limit');
  for (const v of await sb().context(ctx).versions({ limit: limit ? Number(limit) : undefined })) {
    console.log(`${v.id}  ${v.createdAt}  ${v.cause.kind.padEnd(5)}  ${String(v.bytes).padStart(10)}  ${v.cause.command ?? ''}`);
  }
  return 0;
}

/** `shellbase fork CTX NEW [--version V]` */
export async function fork(args: ParsedArgs): Promise<number> {
  const [ctx, name] = need(args, 2, 'shellbase fork CTX NEW [--version V]');
  await sb().context(ctx).fork(name, { version: flag(args, 'version') });
  console.log(name);
  return 0;
}

/** `shellbase tenant create NAME` (prints the new API key once) and `shellbase tenant ls`. */
export async function tenant(args: ParsedArgs): Promise<number> {
  const [sub, name] = args.positionals;
  if (sub === 'create' && name) {
    const r = await sb().tenants.create(name);
    console.error(`tenant ${r.tenant.name} (${r.tenant.id}); its API key, shown only now:`);
    console.log(r.apiKey);
    return 0;
  }
  if (sub === 'ls') {
    for (const t of await sb().tenants.list()) console.log(`${t.name.padEnd(30)} ${t.id}${t.admin ? '  admin' : ''}  ${t.createdAt}`);
    return 0;
  }
  if (sub === 'revoke' && name) {
    await sb().tenants.revoke(name);
    return 0;
  }
  throw new UsageError('shellbase tenant create NAME | tenant ls | tenant revoke NAME');
}

/** `shellbase key create TENANT`, `key ls TENANT`, `key revoke TENANT KEY_ID` (admin key). */
export async function key(args: ParsedArgs): Promise<number> {
  const [sub, name, id] = args.positionals;
  if (sub === 'create' && name) {
    const r = await sb().tenants.createKey(name);
    console.error(`key ${r.key.id} for ${name}, shown only now:`);
    console.log(r.apiKey);
    return 0;
  }
  if (sub === 'ls' && name) {
    for (const k of await sb().tenants.listKeys(name)) console.log(`${k.id}  ${k.createdAt}  ${k.revokedAt ? `revoked ${k.revokedAt}` : 'active'}`);
    return 0;
  }
  if (sub === 'revoke' && name && id) {
    await sb().tenants.revokeKey(name, id);
    return 0;
  }
  throw new UsageError('shellbase key create TENANT | key ls TENANT | key revoke TENANT KEY_ID');
}

/** `shellbase usage [--from T] [--to T] [--group-by context|kind] [--tenant NAME]`: a table. */
export async function usage(args: ParsedArgs): Promise<number> {
  const groupBy = flag(args, 'group-by') as 'context' | 'kind' | undefined;
  const r = await sb().usage({ from: flag(args, 'from'), to: flag(args, 'to'), groupBy, tenant: flag(args, 'tenant') });
  const row = (i: { key: string; queries: number; cpuMs: number; wallMs: number; bytesStored: number }) =>
    `${i.key.padEnd(30)} ${String(i.queries).padStart(8)} ${String(i.cpuMs).padStart(10)} ${String(i.wallMs).padStart(10)} ${String(i.bytesStored).padStart(14)}`;
  console.log(`${(groupBy ?? 'context').padEnd(30)} ${'queries'.padStart(8)} ${'cpu ms'.padStart(10)} ${'wall ms'.padStart(10)} ${'bytes stored'.padStart(14)}`);
  for (const i of r.items) console.log(row(i));
  console.log(row(r.total));
  return 0;
}

export async function gc(): Promise<number> {
  const r = await sb().gc();
  console.log(`dropped ${r.versionsDropped} versions, deleted ${r.layersDeleted} layers (${r.bytesFreed} bytes) in ${r.ms} ms` +
    (r.templatesDeleted ? `, deleted ${r.templatesDeleted} machine templates` : '') +
    (r.deferredLayers ? `; ${r.deferredLayers} layers wait for running work` : ''));
  return 0;
}

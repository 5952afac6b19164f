import path from 'node:path';
import { errorFromBody, type ErrorCode } from '@shellbase/sdk';
import { flag, numberFlag, UsageError, type Command } from '../args.js';
import { sb } from './client.js';
import { server } from './serve.js';

const BACKUP = 'shellbase backup --to DIR|s3://BUCKET/PREFIX [--keep N] [--s3-endpoint URL]   (the whole server, online: admin key)';
const LS = 'shellbase backup ls DIR|s3://… [--s3-endpoint URL] [--json]   (the backups a target holds)';
const VERIFY = 'shellbase backup verify DIR|s3://… [--id ID] [--s3-endpoint URL]   (reads every part and checks its digest)';
const MIGRATE = 'shellbase migrate --metadata postgres://… --blobs s3://BUCKET/PREFIX [--s3-endpoint URL]   (SHELLBASE_HOME, its server stopped, into a cluster\'s stores)';
const RESTORE = 'shellbase restore --from DIR|s3://… [--id ID] [--s3-endpoint URL]   (into SHELLBASE_HOME, empty, no server running)';

/** A target as the server and the stores read it: a relative directory is made absolute here. */
function target(where: string): string {
  return /^[a-z0-9]+:/.test(where) || path.isAbsolute(where) ? where : path.resolve(where);
}

const mib = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;

/** An error of the server package (these commands run it here), made the SDK's typed error a server's answer would be. */
function typed<T>(p: Promise<T>): Promise<T> {
  return p.catch((e: unknown) => {
    const err = e as { name?: string; code?: ErrorCode; message: string; hint?: string; details?: Record<string, unknown> };
    if (err?.name !== 'ShellbaseError' || !err.code) throw e;
    throw errorFromBody({ code: err.code, message: err.message, ...(err.hint ? { hint: err.hint } : {}), ...(err.details ? { details: err.details } : {}) }, 500);
  });
}

/** Backups of a whole server: take one (through the server), list and verify a target's, restore one (here, offline); a home moved into a cluster. */
export const backupCommands: Command[] = [
  {
    name: 'backup',
    spec: { usage: BACKUP, flags: { to: 'string', keep: 'string', 's3-endpoint': 'string' } },
    async run(args) {
      const to = flag(args, 'to');
      if (!to) throw new UsageError(`--to is required\n\nusage: ${BACKUP}`);
      const keep = numberFlag(args, 'keep', BACKUP);
      const endpoint = flag(args, 's3-endpoint');
      let shown = '';
      const r = await sb().backup({
        to: target(to), ...(keep !== undefined ? { keep } : {}), ...(endpoint ? { s3Endpoint: endpoint } : {}),
        onProgress: (p) => {
          const line = `${p.phase} ${p.done}/${p.total}`;
          if (line !== shown && (p.done === p.total || p.done % 50 === 0)) console.error(`backup: ${line} (${mib(p.bytes)} stored)`);
          shown = line;
        },
      });
      console.error(`backup ${r.id}: as of ${r.pointAt}; ${r.layers} layers (${r.copied} copied now), ${mib(r.bytes)} stored`);
      if (r.machines || r.snapshots) console.error(`backup: with the files of ${r.machines} machines and ${r.snapshots} snapshots`);
      for (const l of r.left ?? []) console.error(`backup: not in it: ${l.id} (${l.why}); a restore removes it`);
      if (r.removed?.backups.length) console.error(`backup: removed ${r.removed.backups.length} older backups and ${r.removed.blobs} blobs only they named`);
      console.log(r.id);
      return 0;
    },
  },
  {
    name: 'backup ls',
    spec: { usage: LS, flags: { 's3-endpoint': 'string', json: 'boolean' }, positionals: [1, 1] },
    async run(args) {
      const { listBackups, openBlobStore } = await server();
      const endpoint = flag(args, 's3-endpoint');
      const list = await typed(listBackups(openBlobStore(target(args.positionals[0]), endpoint ? { endpoint } : {})));
      if (args.flags.has('json')) { console.log(JSON.stringify(list, null, 2)); return 0; }
      for (const b of list) {
        console.log(`${b.id}  ${b.complete ? 'complete  ' : 'INCOMPLETE'}  ${b.complete ? `${b.layers} layers, ${mib(b.bytes)}` : `started ${b.startedAt ?? '?'}, never finished: never restored from`}`);
      }
      return 0;
    },
  },
  {
    name: 'backup verify',
    spec: { usage: VERIFY, flags: { id: 'string', 's3-endpoint': 'string' }, positionals: [1, 1] },
    async run(args) {
      const { openBlobStore, readManifest, verifyBackup } = await server();
      const endpoint = flag(args, 's3-endpoint');
      const store = openBlobStore(target(args.positionals[0]), endpoint ? { endpoint } : {});
      const m = await typed(readManifest(store, flag(args, 'id')));
      const damage = await typed(verifyBackup(store, m, (done, total) => { if (done === total || done % 100 === 0) console.error(`verify: ${done}/${total}`); }));
      for (const d of damage) console.error(`backup ${m.id}: ${d.part} is ${d.problem} (${d.digest})`);
      console.log(damage.length === 0 ? `backup ${m.id}: every part is whole` : `backup ${m.id}: ${damage.length} parts missing or damaged`);
      return damage.length === 0 ? 0 : 1;
    },
  },
  {
    name: 'restore',
    spec: { usage: RESTORE, flags: { from: 'string', id: 'string', 's3-endpoint': 'string' } },
    async run(args) {
      const from = flag(args, 'from');
      if (!from) throw new UsageError(`--from is required\n\nusage: ${RESTORE}`);
      const { loadConfig, restoreServer } = await server();
      const endpoint = flag(args, 's3-endpoint');
      const id = flag(args, 'id');
      const config = loadConfig({ cluster: null });
      let shown = '';
      const r = await typed(restoreServer(config, target(from), { ...(id ? { id } : {}), ...(endpoint ? { s3Endpoint: endpoint } : {}) }, (p) => {
        const line = `${p.phase} ${p.done}/${p.total}`;
        if (line !== shown && (p.done === p.total || p.done % 50 === 0)) console.error(`restore: ${line}`);
        shown = line;
      }));
      console.error(`restored backup ${r.id} (as of ${r.pointAt}) into ${config.home}: ${r.tenants} tenants, ${r.contexts} contexts, ${r.versions} versions, ${r.layers} layers`);
      if (r.removed.machines.length || r.removed.snapshots.length) {
        console.error(`restore: ${r.removed.machines.length} machines and ${r.removed.snapshots.length} snapshots were on the server but their files are not in the backup; their records were removed: ${[...r.removed.machines, ...r.removed.snapshots].join(' ')}`);
      }
      console.log(r.id);
      return 0;
    },
  },
  {
    name: 'migrate',
    spec: { usage: MIGRATE, flags: { metadata: 'string', blobs: 'string', 's3-endpoint': 'string' } },
    async run(args) {
      const metadata = flag(args, 'metadata');
      const blobs = flag(args, 'blobs');
      if (!metadata || !blobs) throw new UsageError(`--metadata and --blobs are required\n\nusage: ${MIGRATE}`);
      const { loadConfig, migrateServer } = await server();
      const endpoint = flag(args, 's3-endpoint');
      const config = loadConfig({ cluster: null });
      let shown = '';
      const r = await typed(migrateServer(config, { metadata, blobs: target(blobs), ...(endpoint ? { s3Endpoint: endpoint } : {}) }, (p) => {
        if (p.phase === 'metadata') return;
        const line = `${p.phase} ${p.done}/${p.total}`;
        if (line !== shown && (p.done === p.total || p.done % 100 === 0)) console.error(`migrate: ${line}`);
        shown = line;
      }));
      const total = Object.values(r.rows).reduce((a, b) => a + b, 0);
      console.error(`migrated ${config.home}: ${total} rows, ${r.layers} layers (${r.layersCopied} copied now), ${r.machines} hibernated machines and ${r.snapshots} snapshots; verified`);
      for (const l of r.left) console.error(`migrate: left behind: ${l.id} (${l.why})`);
      console.error('start workers with the same --metadata and --blobs (docs/deploy.md); the admin key is this home\'s admin.key');
      return 0;
    },
  },
];

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { Shellbase } from '@shellbase/sdk';
import { removeCgroupsOf } from '@shellbase/server';
import { startPostgres, type TestPostgres } from './pg.ts';
import { startS3, type TestS3 } from './s3.ts';

const CLI = path.resolve('packages/cli/dist/main.js');
export const PREFIX = 'cluster';

export interface ClusterWorkerProcess {
  name: string; home: string; child: ChildProcess; url: string; gatewayUrl: string; sb: Shellbase;
  /** What it wrote: stderr (what it says to a person), then stdout (its log lines, pino's JSON). */
  log: () => string;
}

/**
 * A cluster on this host for tests and the bench: one throw-away Postgres (test/pg.ts), one S3 API
 * (test/s3.ts), and worker processes (`shellbase serve --metadata … --blobs …`), each with a data
 * directory of its own. `stop` ends the workers (SIGTERM), unmounts what a killed one left, and
 * removes everything.
 */
export interface TestCluster {
  postgres: TestPostgres;
  s3: TestS3;
  database: string;
  workers: ClusterWorkerProcess[];
  /** A worker; the first one started makes the admin key, later ones use it. `env` may name another S3 endpoint (a relay in front of it); `home`, a killed worker's data directory to start over. */
  start(name: string, env?: Record<string, string>, home?: string): Promise<ClusterWorkerProcess>;
  sql<T extends pg.QueryResultRow>(text: string): Promise<T[]>;
  stop(): Promise<void>;
}

/**
 * Unmounts what a worker killed with SIGKILL left under its data directory (the store, machines'
 * memory), removes the directory, and kills and removes the cgroups its sandboxes had (the
 * server's own `removeCgroupsOf`: a server started again on the home would recover them, one
 * killed for good leaves them).
 */
export async function cleanHome(home: string): Promise<void> {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4]).filter((m) => m?.startsWith(`${home}/`));
  for (const m of mounts.sort().reverse()) execFileSync('umount', ['--lazy', m]);
  rmSync(home, { recursive: true, force: true });
  await removeCgroupsOf(home);
}

export async function startCluster(options: { postgresSettings?: string[] } = {}): Promise<TestCluster> {
  const [postgres, s3] = await Promise.all([startPostgres(options.postgresSettings), startS3()]);
  const database = await postgres.createDatabase();
  const workers: ClusterWorkerProcess[] = [];
  let key: string | undefined;
  const c: TestCluster = {
    postgres, s3, database, workers,
    async start(name, env = {}, dir?: string) {
      const home = dir ?? mkdtempSync(path.join(tmpdir(), `shellbase-cluster-${name}-`));
      const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--gateway-port', '0',
        '--metadata', database, '--blobs', `s3://${s3.bucket}/${PREFIX}`, '--s3-endpoint', env.SHELLBASE_S3_ENDPOINT ?? s3.endpoint], {
        env: {
          // No machines restored ahead (tests count QEMU processes), unless the caller's environment asks.
          SHELLBASE_MACHINES_READY: '0',
          ...process.env, SHELLBASE_HOME: home, SHELLBASE_STORE_SIZE_GB: '16', SHELLBASE_LOG_LEVEL: 'warn', SHELLBASE_HEARTBEAT_MS: '300',
          AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test', AWS_REGION: 'us-east-1', ...env,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let err = '';
      // The server's log (pino, on stdout), kept for tests that read it.
      let out = '';
      child.stdout!.on('data', (chunk: Buffer) => { out += chunk.toString(); });
      const w: ClusterWorkerProcess = { name, home, child, url: '', gatewayUrl: '', sb: null as unknown as Shellbase, log: () => `${err}${out}` };
      workers.push(w);
      w.url = await new Promise<string>((resolve, reject) => {
        child.stderr!.on('data', (chunk: Buffer) => {
          err += chunk.toString();
          const m = /serving on (https?:\/\/\S+)/.exec(err);
          const g = /services answer on (https?:\/\/\S+)/.exec(err);
          if (m && g) {
            w.gatewayUrl = g[1];
            resolve(m[1]);
          }
        });
        child.on('exit', (code) => reject(new Error(`worker ${name} exited (${code}): ${err}`)));
      });
      key ??= readFileSync(path.join(home, 'admin.key'), 'utf8').trim();
      w.sb = new Shellbase({ url: w.url, apiKey: key });
      return w;
    },
    async sql(text) {
      const client = new pg.Client({ connectionString: database });
      await client.connect();
      try { return (await client.query(text)).rows; } finally { await client.end(); }
    },
    async stop() {
      const alive = (w: ClusterWorkerProcess) => w.child.exitCode === null && w.child.signalCode === null;
      for (const w of workers) if (alive(w)) w.child.kill('SIGTERM');
      await Promise.all(workers.map((w) => (alive(w) ? new Promise((r) => w.child.once('exit', r)) : null)));
      for (const w of workers) if (w.child.exitCode) console.error(`worker ${w.name} exited with ${w.child.exitCode}:\n${w.log()}`);
      for (const w of workers) await cleanHome(w.home);
      await Promise.all([postgres.stop(), s3.stop()]);
    },
  };
  return c;
}

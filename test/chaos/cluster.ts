import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { cleanHome } from '../cluster-harness.ts';
import { startPostgres, type TestPostgres } from '../pg.ts';
import { startNet, type NetNode, type TestNet } from './net.ts';
import { startRelays, type Relays } from './relay.ts';

const CLI = path.resolve('packages/cli/dist/main.js');
const S3_SERVER = path.resolve('test/chaos/s3-server.ts');
const BUCKET = 'shellbase-chaos';
const API_PORT = 8000;
const GATEWAY_PORT = 8001;
const S3_PORT = 9000;

export interface ChaosWorker {
  name: string;
  node: NetNode;
  home: string;
  child: ChildProcess;
  /** Its API through the relay (from this process). */
  url: string;
  gatewayUrl: string;
  /** Its process is running (it may be paused). */
  alive(): boolean;
  log(): string;
}

/**
 * A cluster on a test network (net.ts): Postgres, the S3 test server and `workers` worker
 * processes, each in a network namespace of its own, the workers' API and gateway reached through
 * relays (relay.ts). The faults a nemesis makes are methods here: kill and restart a worker,
 * pause and resume one, restart Postgres or the S3 server, and the network's partitions, isolation,
 * loss and slow links (`net`).
 */
export interface ChaosCluster {
  net: TestNet;
  postgres: TestPostgres;
  workers: ChaosWorker[];
  adminKey: string;
  heartbeatMs: number;
  /** Workers that exited without being told to (a crash: its last log lines), each started again as a supervisor would. */
  crashes: string[];
  /** Kills a worker with SIGKILL (its sandboxes, services and machines are left as a crash leaves them). */
  kill(w: ChaosWorker): Promise<void>;
  /** Starts a killed worker again on its data directory (a new worker id, the same address). */
  restart(w: ChaosWorker): Promise<void>;
  pause(w: ChaosWorker): void;
  resume(w: ChaosWorker): void;
  restartPostgres(downMs: number): Promise<void>;
  /** Kills the S3 server, waits `downMs`, and starts it again over the same objects. */
  restartS3(downMs: number): Promise<void>;
  sql<T extends pg.QueryResultRow>(text: string, params?: unknown[]): Promise<T[]>;
  stop(): Promise<void>;
}

export async function startChaosCluster(options: { workers: number; heartbeatMs?: number }): Promise<ChaosCluster> {
  const heartbeatMs = options.heartbeatMs ?? 300;
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-chaos-'));
  chmodSync(dir, 0o711);
  const net = startNet();
  let relays: Relays | null = null;
  let s3: ChildProcess | null = null;
  let postgres: TestPostgres | null = null;
  const workers: ChaosWorker[] = [];
  const crashes: string[] = [];
  /** Workers whose exit is the harness's doing (killed by the nemesis, or stopped at the end). */
  const ending = new Set<string>();
  let stopping = false;
  const cleanup = async () => {
    stopping = true;
    for (const w of workers) if (w.alive()) { w.child.kill('SIGCONT'); w.child.kill('SIGTERM'); }
    await Promise.all(workers.map((w) => (w.alive() ? new Promise((r) => w.child.once('exit', r)) : null)));
    for (const w of workers) await cleanHome(w.home);
    s3?.kill('SIGKILL');
    await relays?.close();
    await postgres?.stop();
    net.close();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const pgNode = await net.add('pg');
    const s3Node = await net.add('s3');
    const nodes: NetNode[] = [];
    for (let i = 1; i <= options.workers; i++) nodes.push(await net.add(`w${i}`));
    relays = await startRelays(`/run/netns/${net.prefix}sw`, dir, nodes.flatMap((n) => [`${n.ip}:${API_PORT}`, `${n.ip}:${GATEWAY_PORT}`]));
    postgres = await startPostgres([], { netns: pgNode.ns, host: pgNode.ip });
    const database = await postgres.createDatabase('chaos');
    const s3Dir = path.join(dir, 's3');
    mkdirSync(s3Dir);
    const startS3 = async () => {
      const child = s3Node.spawn(process.execPath, ['--import', 'tsx', S3_SERVER, s3Node.ip, String(S3_PORT), s3Dir, BUCKET], { stdio: ['ignore', 'pipe', 'inherit'] });
      await new Promise<void>((resolve, reject) => {
        child.stdout!.once('data', () => resolve());
        child.once('exit', (code) => reject(new Error(`the S3 server exited (${code})`)));
      });
      s3 = child;
    };
    await startS3();

    let cluster: ChaosCluster;
    const spawnWorker = (w: { node: NetNode; home: string; name: string }) => {
      const child = w.node.spawn(process.execPath, [CLI, 'serve', '--port', String(API_PORT), '--gateway-port', String(GATEWAY_PORT),
        '--metadata', database, '--blobs', `s3://${BUCKET}/cluster`, '--s3-endpoint', `http://${s3Node.ip}:${S3_PORT}`], {
        env: {
          SHELLBASE_MACHINES_READY: '0',
          ...process.env, SHELLBASE_HOME: w.home, SHELLBASE_HOST: w.node.ip, SHELLBASE_ADVERTISE: `http://${w.node.ip}:${API_PORT}`,
          SHELLBASE_STORE_SIZE_GB: '16', SHELLBASE_LOG_LEVEL: process.env.SHELLBASE_CHAOS_LOG_LEVEL ?? 'warn', SHELLBASE_HEARTBEAT_MS: String(heartbeatMs),
          AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test', AWS_REGION: 'us-east-1',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let log = '';
      const keep = (chunk: Buffer) => { log = (log + chunk.toString()).slice(-4_000_000); };
      child.stdout!.on('data', keep);
      const ready = new Promise<void>((resolve, reject) => {
        child.stderr!.on('data', (chunk: Buffer) => {
          keep(chunk);
          if (/services answer on/.test(log)) resolve();
        });
        child.once('exit', (code, signal) => reject(new Error(`worker ${w.name} exited (${code ?? signal}): ${log}`)));
      });
      child.once('exit', (code, signal) => {
        if (stopping || ending.delete(w.name)) return;
        // A crash: recorded, and the worker started again on its data directory.
        crashes.push(`worker ${w.name} exited by itself (${code ?? signal}): ${log.slice(-3000)}`);
        const worker = workers.find((x) => x.name === w.name);
        if (worker) void cluster.restart(worker).catch(() => undefined);
      });
      return { child, ready, log: () => log };
    };

    let adminKey = '';
    for (const node of nodes) {
      const home = path.join(dir, node.name);
      mkdirSync(home);
      chmodSync(home, 0o711);
      const started = spawnWorker({ node, home, name: node.name });
      const w: ChaosWorker = {
        name: node.name, node, home, child: started.child,
        url: relays.url(`${node.ip}:${API_PORT}`), gatewayUrl: relays.url(`${node.ip}:${GATEWAY_PORT}`),
        alive() { return this.child.exitCode === null && this.child.signalCode === null; },
        log: started.log,
      };
      workers.push(w);
      await started.ready;
      // The first worker makes the admin key; the others find it in the shared metadata.
      adminKey ||= readFileSync(path.join(home, 'admin.key'), 'utf8').trim();
    }

    const exited = (w: ChaosWorker) => new Promise<void>((r) => { if (!w.alive()) r(); else w.child.once('exit', () => r()); });
    cluster = {
      net, postgres, workers, adminKey, heartbeatMs, crashes,
      async kill(w) {
        ending.add(w.name);
        w.child.kill('SIGKILL');
        await exited(w);
      },
      async restart(w) {
        const started = spawnWorker(w);
        w.child = started.child;
        w.log = started.log;
        await started.ready;
      },
      pause(w) { w.child.kill('SIGSTOP'); },
      resume(w) { w.child.kill('SIGCONT'); },
      async restartPostgres(downMs) {
        await postgres!.restart(() => new Promise((r) => setTimeout(r, downMs)));
      },
      async restartS3(downMs) {
        const old = s3!;
        old.kill('SIGKILL');
        await new Promise((r) => { if (old.exitCode !== null || old.signalCode !== null) r(null); else old.once('exit', r); });
        await new Promise((r) => setTimeout(r, downMs));
        await startS3();
      },
      async sql(text, params = []) {
        const client = new pg.Client({ host: postgres!.socketDir, port: postgres!.port, user: 'postgres', database: 'chaos' });
        await client.connect();
        try { return (await client.query(text, params)).rows; } finally { await client.end(); }
      },
      stop: cleanup,
    };
    return cluster;
  } catch (e) {
    await cleanup();
    throw e;
  }
}

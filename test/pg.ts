import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';

/**
 * A throw-away Postgres for tests: Debian's `postgresql` package (scripts/setup installs it), a
 * cluster made by `initdb` in a temp directory, started by `pg_ctl` on a free loopback port with
 * its socket in that directory, durability off (fsync, synchronous_commit). Postgres refuses to
 * run as root, so as root its programs run as the `postgres` user, who owns the directory.
 * `stop()` stops it and deletes the directory; so does the process's exit, whatever happened.
 */
export interface TestPostgres {
  port: number;
  /** The directory of its Unix socket (reachable from any network namespace on the host). */
  socketDir: string;
  /** A connection URL for a database of the cluster. */
  url(database: string): string;
  /** Creates an empty database (a fresh name unless given) and returns its URL. */
  createDatabase(name?: string): Promise<string>;
  /** Stops the server (fast shutdown: sessions are ended), runs `whileDown`, and starts it again on the same port. */
  restart(whileDown?: () => Promise<void>): Promise<void>;
  stop(): Promise<void>;
}

/** The newest PostgreSQL under /usr/lib/postgresql/VERSION/bin. */
function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(path.join(root, v, 'bin', 'initdb'))) : [];
  if (versions.length === 0) throw new Error(`no PostgreSQL under ${root}: run scripts/setup (it installs Debian's postgresql)`);
  return path.join(root, versions.sort((a, b) => Number(b) - Number(a))[0], 'bin');
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Where it listens: by default a free port on 127.0.0.1; `netns`, a network namespace's path to run it in (port 5432 on `host` there). */
export interface PostgresPlace { netns?: string; host?: string }

/** `settings`: more `-c name=value` server settings (the bench loads pg_stat_statements). */
export async function startPostgres(settings: string[] = [], place: PostgresPlace = {}): Promise<TestPostgres> {
  const bin = binDir();
  const asRoot = process.getuid?.() === 0;
  const owner = asRoot ? { uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })) } : {};
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-pg-'));
  if (asRoot) chownSync(dir, owner.uid!, owner.gid!);
  const data = path.join(dir, 'data');
  const run = (program: string, args: string[]) => new Promise<void>((resolve, reject) => {
    // nsenter needs root to enter the namespace; it takes the `postgres` user's ids itself after.
    const ids = asRoot ? [`--setuid=${owner.uid}`, `--setgid=${owner.gid}`] : [];
    const [file, argv, as] = place.netns ? ['nsenter', [`--net=${place.netns}`, ...ids, path.join(bin, program), ...args], {}] : [path.join(bin, program), args, owner];
    execFile(file, argv, { ...as, cwd: dir, env: { ...process.env, LC_ALL: 'C.UTF-8' } }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${program} failed: ${stderr || stdout || err.message}`));
      else resolve();
    });
  });
  const stopNow = () => {
    spawnSync(path.join(bin, 'pg_ctl'), ['stop', '-D', data, '-m', 'immediate', '-w'], { ...owner, stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', stopNow);

  const host = place.host ?? '127.0.0.1';
  const port = place.netns ? 5432 : await freePort();
  const all = [`-p ${port}`, `-k ${dir}`, `-c listen_addresses=${host}`, '-c fsync=off', '-c synchronous_commit=off',
    '-c full_page_writes=off', '-c max_connections=200', '-c deadlock_timeout=50ms', ...settings.map((x) => `-c ${x}`)];
  const start = () => run('pg_ctl', ['start', '-D', data, '-l', path.join(dir, 'log'), '-w', '-t', '30', '-o', all.join(' ')]);
  try {
    await run('initdb', ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C.UTF-8', '--no-sync', '--no-instructions']);
    // initdb lets in loopback only; a test network's other hosts may connect too.
    if (place.netns) appendFileSync(path.join(data, 'pg_hba.conf'), `host all all ${host}/24 trust\n`);
    await start();
  } catch (e) {
    process.removeListener('exit', stopNow);
    stopNow();
    throw e;
  }

  const url = (database: string) => `postgres://postgres@${host}:${port}/${database}`;
  let made = 0;
  return {
    port,
    socketDir: dir,
    url,
    async createDatabase(name = `t${process.pid}_${++made}`) {
      const admin = new pg.Client({ host: dir, port, user: 'postgres', database: 'postgres' });
      await admin.connect();
      try { await admin.query(`CREATE DATABASE "${name}"`); } finally { await admin.end(); }
      return url(name);
    },
    async restart(whileDown) {
      await run('pg_ctl', ['stop', '-D', data, '-m', 'fast', '-w']);
      try { await whileDown?.(); } finally { await start(); }
    },
    async stop() {
      process.removeListener('exit', stopNow);
      await run('pg_ctl', ['stop', '-D', data, '-m', 'fast', '-w']).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

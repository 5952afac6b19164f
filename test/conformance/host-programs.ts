import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import type { Cgroup } from '../../packages/server/src/runtime/cgroups/types.ts';
import type { HostPrograms, RunningSandbox, SandboxRuntime } from '../../packages/server/src/runtime/types.ts';
import type { RuntimeFixture } from './runtime.ts';

export interface HostProgramsFixture extends Omit<RuntimeFixture, 'runtime'> {
  /** The host programs, and the sandboxes whose network a bridge joins (`image` must have python3). */
  runtime: SandboxRuntime & HostPrograms;
  /** A directory for the case's files, passable by every id below; `done` removes it. */
  dir: string;
  /** Host ids: the sandboxes' root (a helper runs as it) and a jail's root with `userns`. */
  ids: { sandboxRoot: number; jailRoot: number };
}

const LIMITS = { memoryMb: 256, pids: 64, cpus: 1, outputBytes: 1 << 20, timeoutMs: 60_000 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; !(await check()); await sleep(20)) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
  }
}

/** The host pids in a cgroup, as its join files list them (nothing once it is removed). */
function members(cg: Cgroup): number[] {
  const pids = new Set<number>();
  for (const f of cg.joinFiles) {
    try { for (const l of readFileSync(f, 'utf8').split('\n')) if (l) pids.add(Number(l)); } catch { /* removed */ }
  }
  return [...pids];
}

/** `/proc/PID/stat` after the command's name: state, ppid, ... (absent once the process is gone). */
function statOf(pid: number | string): string[] | null {
  try { const s = readFileSync(`/proc/${pid}/stat`, 'utf8'); return s.slice(s.lastIndexOf(')') + 2).split(' '); } catch { return null; }
}

/** Whether `pid` is a live process (not gone, not a zombie). */
const running = (pid: number) => { const s = statOf(pid); return s !== null && s[0] !== 'Z'; };

/** `pid` and every process below it. */
function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const e of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    const ppid = Number(statOf(e)?.[1]);
    children.set(ppid, [...children.get(ppid) ?? [], Number(e)]);
  }
  const out = [pid];
  for (let i = 0; i < out.length; i++) out.push(...children.get(out[i]) ?? []);
  return out;
}

/** Live processes whose command line names `text`. */
function processesNaming(text: string): number[] {
  return readdirSync('/proc').filter((n) => /^\d+$/.test(n)).map(Number).filter((pid) => {
    try { return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(text) && running(pid); } catch { return false; }
  });
}

/** A host process that joins `cg` as its join files say (writing "0" to each), then execs `argv`. */
function joined(cg: Cgroup, argv: string[]) {
  const child = spawn('sh', ['-c', 'for f in $JOIN; do echo 0 > "$f" || exit 99; done; exec "$@"', 'join', ...argv], {
    env: { ...process.env, JOIN: cg.joinFiles.join(' ') }, stdio: ['ignore', 'pipe', 'inherit'],
  });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.on('exit', (code, signal) => r({ code, signal })));
  return { stdout: () => stdout, exited };
}

/** A directory below the fixture's (mode 755), owned by `owner` if given. */
function dirIn(f: HostProgramsFixture, name: string, owner?: number): string {
  const d = path.join(f.dir, name);
  mkdirSync(d, { recursive: true });
  chmodSync(d, 0o755);
  if (owner !== undefined) chownSync(d, owner, owner);
  return d;
}

/** Answers each connection with "inside:" and what it sent (argv[1]: the port on 127.0.0.1). */
const LISTENER = `import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(b"inside:" + c.recv(64))
    c.close()
`;

/** What answers `text` at a Unix socket or a TCP address (rejects when nothing takes the connection). */
function ask(to: string | { host: string; port: number }, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = typeof to === 'string' ? net.createConnection(to) : net.createConnection(to);
    let got = '';
    c.on('connect', () => c.write(text));
    c.on('data', (d) => { got += d.toString(); });
    c.on('error', reject);
    c.on('close', (failed) => { if (!failed) resolve(got); });
    c.setTimeout(5000, () => c.destroy(new Error('no answer')));
  });
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as net.AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

/** A sandbox running LISTENER on `port` for the time of `fn`. */
async function withListener(f: HostProgramsFixture, port: number, fn: (sandbox: RunningSandbox) => Promise<void>): Promise<void> {
  const scratch = await f.snapshotter.prepare({ diskMb: 64 });
  const abort = new AbortController();
  let started!: (s: RunningSandbox) => void;
  const onStart = new Promise<RunningSandbox>((r) => { started = r; });
  const run = f.runtime.run({
    mount: await f.snapshotter.mounts([f.image], scratch), argv: ['python3', '-c', LISTENER, String(port)], env: {}, cwd: '/root',
    limits: LIMITS, signal: abort.signal, onStart: started,
  });
  try {
    await fn(await Promise.race([onStart, run.then((r) => { throw new Error(`the listener ended: ${r.stderr}`); })]));
  } finally {
    abort.abort();
    await run;
    await f.snapshotter.discard(scratch);
  }
}

/**
 * The cases every HostPrograms backend must pass: cgroups hold their members to their limits
 * and kill them; a helper sees a merged layer stack, confined, and its failure throws; a bridge
 * reaches into a sandbox's network namespace until killed; a jail sees only what it is given.
 * The cases drive them with the host's own sh and python3 (and the image's python3 as a listener).
 */
export function hostProgramsConformance(name: string, make: () => Promise<HostProgramsFixture>) {
  const withHost = (title: string, fn: (f: HostProgramsFixture) => Promise<void>) =>
    test(`${name}: ${title}`, { timeout: 60_000 }, async () => {
      const f = await make();
      try { await fn(f); } finally { await f.done(); }
    });

  withHost('cgroup: its members cannot start more processes than its pids limit allows', async (f) => {
    const FORKS = 'import os, time\nn = 0\nfor _ in range(40):\n    try: pid = os.fork()\n    except OSError: break\n'
      + '    if pid == 0: os.close(1); time.sleep(30); os._exit(0)\n    n += 1\nprint(n)';
    const [few, many] = [8, 64].map((pids) => f.runtime.cgroup({ memoryMb: 256, pids, cpus: 1 }));
    try {
      const [a, b] = [joined(few, ['python3', '-c', FORKS]), joined(many, ['python3', '-c', FORKS])];
      await Promise.all([a.exited, b.exited]);
      assert.equal(Number(b.stdout()), 40, 'a limit of 64 lets all 40 start');
      const n = Number(a.stdout());
      assert.ok(n >= 1 && n < 8, `a limit of 8 counts the forker too (${a.stdout().trim()} started)`);
    } finally {
      await Promise.all([few.release(), many.release()]);
    }
  });

  withHost('cgroup: a member that outgrows its memory limit is killed, and its stats say so', async (f) => {
    const cg = f.runtime.cgroup({ memoryMb: 32, pids: 16, cpus: 1 });
    try {
      assert.equal(cg.stats().oomKilled, false);
      const p = joined(cg, ['python3', '-c', 'b = b"x" * (128 << 20)\nprint("survived")']);
      assert.deepEqual(await p.exited, { code: null, signal: 'SIGKILL' });
      assert.equal(p.stdout(), '');
      assert.equal(cg.stats().oomKilled, true);
    } finally {
      await cg.release();
    }
  });

  withHost('cgroup: its cpus limit (and setCpuCap) cap its members\' CPU time, which its stats count', async (f) => {
    const free = f.runtime.cgroup({ memoryMb: 256, pids: 16, cpus: 1 });
    const limited = f.runtime.cgroup({ memoryMb: 256, pids: 16, cpus: 0.01 });
    const capped = f.runtime.cgroup({ memoryMb: 256, pids: 16, cpus: 1 });
    capped.setCpuCap(0.01);
    const all = [free, limited, capped];
    try {
      for (const cg of all) joined(cg, ['sh', '-c', 'while :; do :; done']);
      await until('every cgroup has its busy member', () => all.every((cg) => members(cg).length === 1));
      // Rates over a one-second window: a cap bounds them however loaded the host is, and the
      // uncapped sibling shows the window could tell (a busy host gets a few more windows).
      let [a, b, c, wall] = [0, 0, 0, 0];
      for (let i = 0; i < 5 && a < wall * 0.1 + 1; i++) {
        const [before, t0] = [all.map((cg) => cg.stats().cpuMs), performance.now()];
        await sleep(1000);
        wall = performance.now() - t0;
        [a, b, c] = all.map((cg, j) => cg.stats().cpuMs - before[j]);
      }
      assert.ok(b > 0 && c > 0, `capped members' CPU time is counted (${b}, ${c} ms)`);
      assert.ok(b < wall * 0.05 && c < wall * 0.05, `capped at 0.01 cores: ${b} and ${c} ms in ${Math.round(wall)} ms`);
      assert.ok(a > 3 * Math.max(b, c), `the uncapped sibling had more: ${a} ms`);
    } finally {
      await Promise.all(all.map((cg) => cg.release()));
    }
  });

  withHost('cgroup: signal() reaches every member; kill() empties it', async (f) => {
    const cg = f.runtime.cgroup({ memoryMb: 256, pids: 16, cpus: 1 });
    try {
      const termed = joined(cg, ['sh', '-c', 'sleep 600 & sleep 600 & wait']);
      await until('three members', () => members(cg).length === 3);
      cg.signal('SIGTERM');
      await until('SIGTERM ended them all', () => members(cg).length === 0);
      assert.equal((await termed.exited).signal, 'SIGTERM');

      const deaf = joined(cg, ['sh', '-c', 'trap "" TERM; sleep 600 & sleep 600 & wait']);
      await until('three members that ignore SIGTERM', () => members(cg).length === 3);
      const pids = members(cg);
      cg.signal('SIGTERM');
      await sleep(200);
      assert.deepEqual(members(cg).sort(), pids.sort(), 'a signal is only a signal');
      await cg.kill();
      assert.deepEqual(members(cg), [], 'empty once kill() resolved');
      assert.equal((await deaf.exited).signal, 'SIGKILL');
      await until('its processes are gone', () => !pids.some(running), 2000);
    } finally {
      await cg.release();
    }
  });

  withHost('cgroup: release() kills what is left in it', async (f) => {
    const cg = f.runtime.cgroup({ memoryMb: 256, pids: 16, cpus: 1 });
    const p = joined(cg, ['sh', '-c', 'trap "" TERM; sleep 600 & sleep 600 & wait']);
    await until('three members', () => members(cg).length === 3);
    const pids = members(cg);
    await cg.release();
    assert.deepEqual(members(cg), []);
    assert.equal((await p.exited).signal, 'SIGKILL');
    await until('its processes are gone', () => !pids.some(running), 2000);
  });

  /** Runs a helper over the image in a fresh scratch (discarded after), with these lowers above it. */
  const helper = async (f: HostProgramsFixture, argv: (merged: string) => string[], extraLowers?: string[]) => {
    const scratch = await f.snapshotter.prepare({ diskMb: 64 });
    try {
      await f.runtime.runHelper({ mount: await f.snapshotter.mounts([f.image], scratch), extraLowers, argv });
    } finally {
      await f.snapshotter.discard(scratch);
    }
  };

  withHost('runHelper: the tool sees the image below the extra lowers (top first), with ids as a sandbox sees them', async (f) => {
    const [top, bottom, out] = [dirIn(f, 'top'), dirIn(f, 'bottom'), dirIn(f, 'out', f.ids.sandboxRoot)];
    writeFileSync(path.join(top, 'x'), 'top\n');
    writeFileSync(path.join(bottom, 'x'), 'bottom\n');
    writeFileSync(path.join(bottom, 'y'), 'bottom only\n');
    const imageText = (await f.snapshotter.reader(f.image)).readAll(f.imageFile.slice(1)).toString();
    await helper(f, (merged) => ['sh', '-c', '{ cat "$1/x" "$1/y" "$1$3"; stat -c %u "$1$3"; id -u; } > "$2/seen"', 'helper', merged, out, f.imageFile], [top, bottom]);
    const seen = path.join(out, 'seen');
    assert.equal(readFileSync(seen, 'utf8'), `top\nbottom only\n${imageText}0\n0\n`);
    assert.equal(statSync(seen).uid, f.ids.sandboxRoot, 'what it writes is the sandboxes\' root\'s on the host');
  });

  withHost('runHelper: the tool is not host root, and the merged tree is mounted only where it runs', async (f) => {
    const out = dirIn(f, 'out', f.ids.sandboxRoot);
    const [hostFile, secret] = [path.join(f.dir, 'host-file'), path.join(f.dir, 'secret')];
    writeFileSync(hostFile, 'host\n', { mode: 0o644 });
    writeFileSync(secret, 'secret\n', { mode: 0o600 });
    const script = 'touch "$2/started"; while [ ! -e "$2/go" ]; do sleep 0.05; done; {'
      + ' awk -v p="$1" \'$5 == p\' /proc/self/mountinfo | wc -l; echo changed > "$3" && echo WROTE; cat "$4" && echo READ; } > "$2/report" 2>/dev/null; true';
    let merged = '';
    let ended = false;
    const failed = helper(f, (m) => { merged = m; return ['sh', '-c', script, 'helper', m, out, hostFile, secret]; })
      .then(() => null, (e: unknown) => e).finally(() => { ended = true; });
    try {
      await until('the helper started', () => existsSync(path.join(out, 'started')) || ended);
      const mountPoints = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4]);
      assert.ok(merged && !mountPoints.includes(merged), `the host does not see ${merged} mounted`);
    } finally {
      writeFileSync(path.join(out, 'go'), ''); // the helper ends, whatever failed
      await failed;
    }
    assert.equal(await failed, null);
    assert.equal(readFileSync(path.join(out, 'report'), 'utf8'), '1\n', 'mounted inside; the host\'s files neither written nor read');
    assert.equal(readFileSync(hostFile, 'utf8'), 'host\n');
  });

  withHost('runHelper: a tool that fails, or is missing, makes it throw', async (f) => {
    await helper(f, () => ['true']);
    await assert.rejects(helper(f, () => ['sh', '-c', 'exit 3']));
    await assert.rejects(helper(f, () => ['no-such-helper-tool']));
  });

  withHost('bridge: a host socket reaches the target in a sandbox\'s network namespace, only there; kill() ends it', async (f) => {
    const port = await freePort();
    const socketPath = path.join(f.dir, 'bridge.sock');
    await withListener(f, port, async (sandbox) => {
      const b = f.runtime.bridge({ netnsPid: await sandbox.innerPid(), socketPath, target: `TCP4:127.0.0.1:${port}` });
      try {
        let answer = '';
        await until('the listener answers through the bridge', async () => (answer = await ask(socketPath, 'ping').catch(() => '')) !== '');
        assert.equal(answer, 'inside:ping');
        await assert.rejects(ask({ host: '127.0.0.1', port }, 'ping'), 'the host\'s own 127.0.0.1 has no such listener');
      } finally {
        b.kill();
      }
      await b.exited;
      await assert.rejects(ask(socketPath, 'ping'), 'nothing answers once killed');
      await until('no process of the bridge is left', () => processesNaming(socketPath).length === 0, 2000);
    });
  });

  withHost('bridge: a target that refuses is reported to onError', async (f) => {
    const [port, closed] = [await freePort(), await freePort()];
    const socketPath = path.join(f.dir, 'bridge.sock');
    await withListener(f, port, async (sandbox) => {
      const errors: string[] = [];
      const b = f.runtime.bridge({ netnsPid: await sandbox.innerPid(), socketPath, target: `TCP4:127.0.0.1:${closed}`, onError: (t) => errors.push(t) });
      try {
        await until('the bridge listens', () => existsSync(socketPath));
        assert.equal(await ask(socketPath, 'ping').catch(() => ''), '');
        await until('onError was called', () => errors.length > 0);
        assert.match(errors.join(''), /refused/i);
      } finally {
        b.kill();
        await b.exited;
      }
    });
  });

  /** Starts a jail, collecting its stderr. */
  const jailed = (f: HostProgramsFixture, spec: Parameters<HostPrograms['jail']>[0]) => {
    let stderr = '';
    const p = f.runtime.jail(spec, { onStderr: (c) => { stderr += c.toString(); } });
    return { p, stderr: () => stderr };
  };

  withHost('jail: its stderr reaches onStderr (its stdout does not), and its exit is reported', async (f) => {
    const { p, stderr } = jailed(f, { argv: ['sh', '-c', 'echo to-stdout; echo to-stderr >&2; exit 4'], readable: [], writable: [] });
    assert.ok((await p.pid) > 0);
    assert.deepEqual(await p.exited, { code: 4, signal: null });
    assert.equal(stderr(), 'to-stderr\n');
  });

  withHost('jail: it sees /usr and the paths given (readable ones read-only), no other host file', async (f) => {
    const [readable, writable, hidden] = [dirIn(f, 'readable'), dirIn(f, 'writable'), dirIn(f, 'hidden')];
    writeFileSync(path.join(readable, 'file'), 'readable\n');
    writeFileSync(path.join(hidden, 'file'), 'hidden\n');
    const script = 'exec >&2; cat "$1/file"; touch "$1/new" 2>/dev/null && echo READABLE-WRITTEN; echo written > "$2/new"\n'
      + 'for p in "$3/file" "$4" /etc/hostname /root /var; do [ -e "$p" ] && echo "SEES $p"; done; [ -x /usr/bin/sh ]';
    const { p, stderr } = jailed(f, { argv: ['sh', '-c', script, 'jailed', readable, writable, hidden, process.cwd()], readable: [readable], writable: [writable] });
    assert.deepEqual(await p.exited, { code: 0, signal: null }, stderr());
    assert.equal(stderr(), 'readable\n');
    assert.equal(readFileSync(path.join(writable, 'new'), 'utf8'), 'written\n');
    assert.equal(existsSync(path.join(readable, 'new')), false);
  });

  withHost('jail: its own pid and network namespaces, no capabilities, its nofile limit, only the devices given', async (f) => {
    const [given, other] = ['/dev/kvm', '/dev/fuse', '/dev/loop-control', '/dev/net/tun'].filter((d) => existsSync(d));
    const script = 'exec >&2; [ -e "/proc/$1" ] && echo "SEES HOST PID"; echo "pid $$"\n'
      + 'echo "links $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\\n" " ")"; grep ^CapEff /proc/self/status\n'
      + 'echo "nofile $(ulimit -n)"; for d in "$2" "$3"; do [ -n "$d" ] && [ -e "$d" ] && echo "device $d"; done; true';
    const { p, stderr } = jailed(f, {
      argv: ['sh', '-c', script, 'jailed', String(process.pid), given ?? '', other ?? ''], readable: [], writable: [], nofile: 321,
      devices: given ? [given] : [],
    });
    assert.deepEqual(await p.exited, { code: 0, signal: null }, stderr());
    const lines = stderr().split('\n');
    assert.ok(Number(lines[0].replace('pid ', '')) <= 3, `its own pid namespace: ${lines[0]}`);
    assert.deepEqual(lines.slice(1), ['links lo ', 'CapEff:\t0000000000000000', 'nofile 321', ...given ? [`device ${given}`] : [], '']);
  });

  withHost('jail: with userns it is root only of a namespace that maps the jails\' id, not host root', async (f) => {
    const [own, host] = [dirIn(f, 'own', f.ids.jailRoot), dirIn(f, 'host')];
    writeFileSync(path.join(host, 'secret'), 'secret\n', { mode: 0o600 });
    const script = 'exec >&2; id -u; echo mine > "$1/mine"; cat "$2/secret" 2>/dev/null && echo READ-HOST-SECRET; true';
    const { p, stderr } = jailed(f, { argv: ['sh', '-c', script, 'jailed', own, host], readable: [host], writable: [own], userns: true });
    assert.deepEqual(await p.exited, { code: 0, signal: null }, stderr());
    assert.equal(stderr(), '0\n');
    assert.equal(statSync(path.join(own, 'mine')).uid, f.ids.jailRoot, 'its root is the jails\' id on the host');
  });

  withHost('jail: kill() ends it and every process it started; the cgroup given holds them all', async (f) => {
    const cg = f.runtime.cgroup({ memoryMb: 256, pids: 16, cpus: 1 });
    const { p, stderr } = jailed(f, { argv: ['sh', '-c', 'sleep 600 & sleep 600 & echo ready >&2; wait'], readable: [], writable: [], cgroup: cg });
    try {
      await until('the jail is ready', () => stderr().includes('ready'));
      const tree = processTree(await p.pid);
      assert.ok(tree.length >= 3, `sh and its two sleeps at least: ${tree.length}`);
      assert.deepEqual(tree.filter((pid) => !members(cg).includes(pid)), [], 'every process of the jail is in its cgroup');
      p.kill();
      assert.notDeepEqual(await p.exited, { code: 0, signal: null });
      await until('its processes are gone', () => !tree.some(running), 5000);
      assert.deepEqual(members(cg), []);
    } finally {
      p.kill();
      await p.exited.catch(() => undefined);
      await cg.release();
    }
  });
}

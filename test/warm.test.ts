import assert from 'node:assert/strict';
import { execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { Shellbase } from '@shellbase/sdk';
import { sleep, spawnServer, startTestServer, type TestServer } from './harness.ts';

const execFileAsync = promisify(execFile);

/**
 * `sbx warm` processes of a server (their arguments name its home): outer pid → member id. One
 * asynchronous `ps`: the server shares this process's event loop, which must not be blocked.
 */
async function members(home: string): Promise<Map<number, number>> {
  const rows: { pid: number; ppid: number; id: number }[] = [];
  for (const line of (await execFileAsync('ps', ['-eo', 'pid=,ppid=,args='], { encoding: 'utf8' })).stdout.split('\n')) {
    const m = /^\s*(\d+)\s+(\d+)\s+\S*sbx warm --connect (\S+) --id (\d+)/.exec(line);
    if (m && m[3].startsWith(`${home}/`)) rows.push({ pid: Number(m[1]), ppid: Number(m[2]), id: Number(m[4]) });
  }
  // The inner is a child with the same arguments: keep outers only (their parent is no member).
  const pids = new Set(rows.map((r) => r.pid));
  return new Map(rows.filter((r) => !pids.has(r.ppid)).map((r) => [r.pid, r.id]));
}

/** The first child of a process (a member's inner), if any. */
async function childOf(pid: number): Promise<number | null> {
  const out = (await execFileAsync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' }).catch(() => ({ stdout: '' }))).stdout.trim();
  return out ? Number(out.split('\n')[0]) : null;
}

async function until(what: string, ok: () => Promise<boolean>, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(20)) if (await ok()) return;
  assert.fail(`timed out waiting until ${what}`);
}

/** The warm member a query ran in, from its pid 1's arguments (null: it started cold, pid 1 is bwrap). */
const WHICH = `tr '\\0' ' ' < /proc/1/cmdline`;
function memberOf(cmdline: string): number | null {
  const m = / --id (\d+) /.exec(cmdline);
  return m ? Number(m[1]) : null;
}

/**
 * Runs a query whose output starts with WHICH until it ran warm (a member's process shows in
 * `ps` a little before it is ready, so a query right after may still start cold): a few tries.
 */
async function warmly<R extends { stdout: string }>(query: () => Promise<R>): Promise<R> {
  let r = await query();
  for (let i = 0; i < 5 && memberOf(r.stdout) === null; i++) {
    await sleep(300);
    r = await query();
  }
  return r;
}

/** What a command can see of its sandbox's isolation; identical on both paths but for pid 1's name. */
const PROBE = [
  `grep -E '^(Cap|NoNewPrivs|Seccomp|Uid|Gid|Groups)' /proc/self/status`,
  `grep -E '^(Cap|NoNewPrivs|Seccomp|Uid|Gid|Groups|Sig(Blk|Ign|Cgt))' /proc/1/status`,
  `awk '{print $5, $6, $9, $10}' /proc/self/mountinfo | sed 's/upperdir=[^,]*,workdir=[^,]*//' | sort`,
  'ls -la /dev /dev/pts /tmp | awk \'{print $1, $3, $4, $NF}\'', 'hostname', 'cat /proc/self/cgroup', 'ulimit -n', 'umask', 'id',
  'cat /proc/self/uid_map /proc/self/gid_map /proc/net/if_inet6', 'ls /sys/class/net', 'ps -o pid=,sid= -p $$',
  'cat /etc/hosts | head -3', 'mount -t tmpfs none /mnt 2>&1 | head -1; unshare -n true 2>&1 | head -1',
].join('; echo ==; ');

describe('warm sandboxes: queries start in sandboxes made ahead', () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
    await until('a warm sandbox is ready', async () => (await members(t.home)).size > 0);
  });
  after(async () => { await t?.close(); });

  test('a warm sandbox looks exactly like a cold one (isolation, mounts, devices, ids, limits)', async () => {
    const ctx = t.sb.context('probe');
    const warm = await warmly(() => ctx.exec(`${WHICH}; echo; ${PROBE}`));
    // stdin makes a query start cold (a warm sandbox's stdin is fixed when it is made).
    const cold = await ctx.exec(`${WHICH}; echo; ${PROBE}`, { stdin: 'x' });
    const [warmWho, ...warmSeen] = warm.stdout.split('\n');
    // The one difference, by design: a cold sandbox with egress runs sbx-forward (bound in at
    // /tmp/.shellbase/forward) to serve the proxy's ports; a warm one's pid 1 serves them itself.
    const [coldWho, ...coldSeen] = cold.stdout.split('\n').filter((l) => !l.startsWith('/tmp/.shellbase/forward '));
    assert.ok(cold.stdout.includes('/tmp/.shellbase/forward ') && !warm.stdout.includes('/tmp/.shellbase/forward '), 'egress is on: a cold sandbox binds sbx-forward, a warm one does not');
    assert.notEqual(memberOf(warmWho), null, `warm: ${warmWho}`);
    assert.equal(memberOf(coldWho), null, `cold: ${coldWho}`);
    assert.match(coldWho, /^bwrap /);
    assert.deepEqual(warmSeen, coldSeen);
    assert.equal(warm.stderr, cold.stderr);
    assert.match(warm.stdout, /CapEff:\t00000000800405fb/);
    assert.match(warm.stdout, /Seccomp:\t2/);
    assert.equal(warm.exitCode, cold.exitCode);
    // Failures of the command's own start: a missing program, a missing working directory.
    for (const req of [{ argv: ['no-such-program'] }, { argv: ['true'], cwd: '/no/such/dir' }]) {
      await until('a warm sandbox is ready', async () => (await members(t.home)).size > 0);
      const w = await ctx.exec(req.argv, { cwd: req.cwd });
      const c = await ctx.exec(req.argv, { cwd: req.cwd, stdin: 'x' });
      assert.deepEqual([w.exitCode, w.stderr, w.stdout], [c.exitCode, c.stderr, c.stdout]);
      assert.notEqual(w.exitCode, 0);
    }
  });

  test('a warm sandbox\'s command runs in its query\'s cgroups (its CPU and memory counted, its pids capped), also after an idle moment', async () => {
    const ctx = t.sb.context('cgroups');
    // After a pause: the inner joins a v1 cgroup by itself (warm-mount.c), never missing it.
    await sleep(300);
    // dd's 64 MiB buffer: the peak is reported above what the reused cgroup held before, which
    // may shrink meanwhile, so the bar is lower than the buffer.
    const r = await warmly(() => ctx.exec(`${WHICH}; echo; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; dd if=/dev/zero of=/dev/null bs=64M count=1 status=none`));
    assert.notEqual(memberOf(r.stdout), null, `warm: ${r.stdout}`);
    assert.ok(r.usage.cpuMs >= 50, `the command's CPU is the query's: ${r.usage.cpuMs} ms`);
    assert.ok(r.usage.memoryPeakBytes >= 32 * 2 ** 20, `the command's memory is the query's: ${r.usage.memoryPeakBytes} bytes`);
    const bomb = await warmly(() => ctx.exec(`${WHICH}; echo; for i in $(seq 30); do sleep 1 & done; wait`, { timeoutMs: 30_000, limits: { pids: 16 } }));
    assert.notEqual(memberOf(bomb.stdout), null, `warm: ${bomb.stdout}`);
    assert.match(bomb.stderr, /fork|resource temporarily unavailable/i, 'the pids cap holds');
  });

  test('each warm sandbox runs one query, never two, across tenants too; the pool refills', async () => {
    const bob = new Shellbase({ url: t.server.url, apiKey: (await t.http('POST', '/v1/tenants', { body: { name: 'bob' } })).json.apiKey });
    const seen: number[] = [];
    for (let i = 0; i < 6; i++) {
      await until('a warm sandbox is ready', async () => (await members(t.home)).size > 0);
      for (const sb of [t.sb, bob]) {
        const r = await sb.context('once').exec(`${WHICH}; echo hi > /root/f`);
        assert.equal(r.exitCode, 0);
        assert.equal(r.committed, true);
        const id = memberOf(r.stdout);
        if (id !== null) seen.push(id);
      }
    }
    assert.ok(seen.length >= 6, `most queries ran warm (${seen.length} of 12)`);
    assert.equal(new Set(seen).size, seen.length, `no member ran twice: ${seen.join(' ')}`);
    const left = new Set((await members(t.home)).values());
    for (const id of seen) assert.ok(!left.has(id), `member ${id} is gone after its query`);
    await until('the pool refilled', async () => (await members(t.home)).size > 0);
  });

  test('after a lull, the first two queries of a burst both start warm (the idle pool keeps two)', async () => {
    // The tests before leave the pool bigger: it trims to its idle size every 5 s (one-second window).
    await until('the pool is back to its idle size', async () => (await members(t.home)).size === 2, 20_000);
    await sleep(300);
    const ctx = t.sb.context('burst');
    // Together: the second cannot wait for a member made after the first was taken.
    const [first, second] = await Promise.all([ctx.exec(WHICH), ctx.exec(WHICH)]);
    assert.notEqual(memberOf(first.stdout), null, `first: ${first.stdout}`);
    assert.notEqual(memberOf(second.stdout), null, `second: ${second.stdout}`);
    assert.notEqual(memberOf(first.stdout), memberOf(second.stdout));
  });

  test('parallel queries on one context each get their own sandbox; output, exit codes and writes are theirs', async () => {
    const ctx = t.sb.context('parallel');
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => ctx.exec(`${WHICH}; echo ${i} > /root/f${i}; exit ${i}`)));
    results.forEach((r, i) => assert.equal(r.exitCode, i));
    const ids = results.map((r) => memberOf(r.stdout)).filter((x) => x !== null);
    assert.equal(new Set(ids).size, ids.length);
    const files = await ctx.exec('cat /root/f*');
    assert.equal(files.stdout, '0\n1\n2\n3\n4\n5\n6\n7\n');
  });

  test('a killed member is dropped and replaced; queries still run (warm or cold), none fails', async () => {
    await until('a warm sandbox is ready', async () => (await members(t.home)).size > 0);
    const killed = new Set<number>();
    for (const [pid, id] of await members(t.home)) {
      // Alternately the inner (the sandbox's pid 1) and the outer.
      const inner = await childOf(pid);
      process.kill(killed.size % 2 === 0 && inner ? inner : pid, 'SIGKILL');
      killed.add(id);
    }
    assert.ok(killed.size > 0);
    const results = await Promise.all(Array.from({ length: 4 }, () => t.sb.context('killed').exec(`${WHICH}; true`)));
    for (const r of results) {
      assert.equal(r.exitCode, 0, r.stderr);
      const id = memberOf(r.stdout);
      assert.ok(id === null || !killed.has(id), `a killed member ran a query: ${id}`);
    }
    await until('new members replaced the killed ones', async () => [...(await members(t.home)).values()].some((id) => !killed.has(id)));
  });

  test('timeouts, signals and output caps behave as on the cold path', async () => {
    await until('a warm sandbox is ready', async () => (await members(t.home)).size > 0);
    const ctx = t.sb.context('limits');
    const slow = await ctx.exec(`${WHICH}; sleep 30`, { timeoutMs: 300 });
    assert.equal(slow.timedOut, true);
    assert.equal(slow.exitCode, 137);
    await until('a warm sandbox is ready', async () => (await members(t.home)).size > 0);
    const sig = await ctx.exec('kill -TERM $$');
    assert.equal(sig.exitCode, 143);
    assert.equal(sig.signal, 'SIGTERM');
    await until('a warm sandbox is ready', async () => (await members(t.home)).size > 0);
    const flood = await ctx.exec('head -c 3000000 /dev/zero | tr "\\0" a', { limits: { outputBytes: 1000 } });
    assert.equal(flood.stdout.length, 1000);
    assert.equal(flood.truncated, true);
    const bg = await warmly(() => ctx.exec(`${WHICH}; (sleep 30 &) ; echo started`));
    assert.notEqual(memberOf(bg.stdout), null);
    await sleep(200);
    const ps = (await execFileAsync('ps', ['-eo', 'args'], { encoding: 'utf8' })).stdout;
    assert.ok(!/^sleep 30$/m.test(ps), 'a background process does not outlive its query');
  });
});

describe('warm sandboxes after a crash', () => {
  // Made in a hook, not when the file loads: a run that filters this suite out leaves nothing.
  let home = '';
  before(() => { home = mkdtempSync(path.join(tmpdir(), 'shellbase-warm-')); });
  let child: ChildProcess | null = null;
  after(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child!.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    if (home) rmSync(home, { recursive: true, force: true });
  });

  test('a killed server leaves no warm sandbox behind, and the next one makes new ones', async () => {
    let s = await spawnServer(home);
    child = s.child;
    await until('a warm sandbox is ready', async () => (await members(home)).size > 0);
    const exited = new Promise((r) => s.child.once('exit', r));
    s.child.kill('SIGKILL');
    await exited;
    await until('its warm sandboxes are gone', async () => (await members(home)).size === 0);
    s = await spawnServer(home);
    child = s.child;
    await until('a warm sandbox is ready', async () => (await members(home)).size > 0);
    const r = await warmly(() => s.sb.context('after').exec(WHICH));
    assert.notEqual(memberOf(r.stdout), null);
  });
});

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import pino from 'pino';
import { startServer } from '@shellbase/server';
import { Shellbase, type MachineHandle } from '@shellbase/sdk';
import { qemuProcesses, sleep, spawnServer, startTestServer, type TestServer } from './harness.ts';

// Machines under TCG (no working KVM here): a restore takes seconds, not milliseconds. At most two
// VMs run at once. The first create on a fresh host builds the debian template (one boot, ~30-60 s).
const CLI = path.resolve('packages/cli/dist/main.js');
const run = promisify(execFile);
const COUNTER = "setsid -f sh -c 'i=0; while true; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done' >/dev/null 2>&1";
const counter = async (m: MachineHandle) => Number((await m.exec('cat /run/counter')).stdout.trim());
/** QEMU processes serving this test server's home. */
const qemus = (home: string) => qemuProcesses(home);

describe('machines', { timeout: 900_000 }, () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('healthz names the accelerator and why', async () => {
    const r = await fetch(`${t.server.url}/healthz`);
    const body = await r.json() as { machines: { accel: string; reason: string } };
    assert.ok(['kvm', 'tcg'].includes(body.machines.accel), JSON.stringify(body));
    assert.ok(body.machines.reason.length > 0);
  });

  test('a machine runs systemd; exec streams, caps output and times out; files read and write', async () => {
    const m = await t.sb.machines.create({ memoryMb: 512 });
    try {
      assert.equal((await m.info()).state, 'running');
      const r = await m.exec('echo pid1=$(cat /proc/1/comm); systemctl is-system-running; id -u; echo err >&2; exit 3');
      assert.deepEqual([r.exitCode, r.stdout, r.stderr], [3, 'pid1=systemd\nrunning\n0\n', 'err\n']);
      // The agent's child sets a command's environment and directory; stdin bytes follow down a pipe.
      const shown = 'printf "%s|%s|%s|%s|" "$PWD" "$HOME" "$LANG" "$GREETING"; cat';
      assert.equal((await m.exec(shown, { cwd: '/etc', env: { GREETING: 'hi' } })).stdout, '/etc|/root|C.UTF-8|hi|');
      assert.equal((await m.exec(shown, { cwd: '/etc', env: { GREETING: 'hi' }, stdin: 'in' })).stdout, '/etc|/root|C.UTF-8|hi|in');
      const piecesOfStdin = 'x'.repeat(2.5 * (1 << 20));
      assert.equal((await m.exec('wc -c', { stdin: piecesOfStdin })).stdout.trim(), String(piecesOfStdin.length), 'stdin of more than a piece arrives whole');
      assert.equal((await m.exec('exit 4', { stdin: piecesOfStdin })).exitCode, 4, 'a command that reads none of it ends as it would');
      const missing = await m.exec(['/no/such/program']);
      assert.equal(missing.exitCode, 127, 'a program that is not there exits 127, as from a shell');
      assert.match(missing.stderr, /\/no\/such\/program: .*ENOENT/);
      const streamed = [];
      for await (const e of m.execStream(['/no/such/program'])) streamed.push(e);
      assert.match(streamed.filter((e) => e.type === 'stderr').map((e) => (e as { data: string }).data).join(''), /ENOENT/, 'and a stream carries the line');
      assert.equal((streamed.at(-1) as { exitCode?: number }).exitCode, 127);
      assert.equal((await m.exec(['/etc/hostname'])).exitCode, 126, 'a file that is not a program: 126');
      assert.equal((await m.exec(['true'], { cwd: '/no/such/dir' })).exitCode, 125, 'a directory that is not there: 125, as `env -C`');
      const events = [];
      for await (const e of m.execStream(['bash', '-c', 'echo one; sleep 0.3; echo two'])) events.push(e);
      assert.deepEqual(events.filter((e) => e.type === 'stdout').map((e) => (e as { data: string }).data).join(''), 'one\ntwo\n');
      assert.equal(events.at(-1)?.type, 'exit');
      // Multi-byte characters split across reads (3-byte writes, pauses between) arrive whole in the stream.
      const halves = 'import sys, time\nb = "é".encode() * 1500\nfor i in range(0, len(b), 3):\n  sys.stdout.buffer.write(b[i:i + 3]); sys.stdout.buffer.flush()\n  if i % 300 == 0: time.sleep(0.01)';
      const accents = [];
      for await (const e of m.execStream(['python3', '-c', halves])) if (e.type === 'stdout') accents.push(e.data);
      assert.equal(accents.join(''), 'é'.repeat(1500));
      const big = await m.exec('head -c 100000 /dev/zero | tr "\\0" x', { limits: { outputBytes: 1000 } });
      assert.equal(big.stdout.length, 1000);
      assert.equal(big.truncated, true);
      const slow = await m.exec('sleep 30; echo late', { timeoutMs: 1000 });
      assert.equal(slow.timedOut, true);
      assert.deepEqual(slow.limit, { name: 'timeoutMs', value: 1000, max: 3_600_000 }, 'the limit it met, its value and the tenant\'s maximum');
      assert.equal(slow.stdout, '');
      assert.equal((await m.exec('pgrep -c -x sleep || true')).stdout.trim(), '0', 'a timed-out command dies with its children');
      await m.files.write('/srv/data/hello.txt', 'hello machine', { mode: 0o600 });
      assert.equal((await m.files.read('/srv/data/hello.txt')).toString(), 'hello machine');
      assert.equal((await m.exec('stat -c %a /srv/data/hello.txt')).stdout.trim(), '600');
      assert.deepEqual(await m.files.list('/srv/data'), ['hello.txt']);
      await assert.rejects(m.files.read('/nope'), (e: Error & { code?: string }) => e.code === 'not_found');
      const bad = await t.http('GET', `/v1/machines/${m.id}/files/..%2f..%2fetc`);
      assert.ok(bad.status === 404 || bad.status === 200, 'a path is the guest\'s own: nothing of the host is reachable');
    } finally {
      await m.remove();
    }
  });

  test('fork: a counter goes on from the same value in the source and the fork, files diverge after, random state differs', async () => {
    const src = await t.sb.machines.create();
    try {
      await src.exec(`${COUNTER}; echo before > /root/shared`);
      await sleep(500);
      const [fork] = await src.fork(1);
      try {
        const [a, b] = [await counter(src), await counter(fork)];
        assert.ok(a > 0 && b > 0, `both count (${a}, ${b})`);
        await sleep(1500);
        assert.ok(await counter(fork) > b, 'the fork\'s counter keeps counting');
        assert.ok(await counter(src) > a, 'the source keeps running');
        assert.equal((await fork.exec('cat /root/shared')).stdout, 'before\n');
        await fork.exec('echo fork > /root/shared');
        assert.equal((await src.exec('cat /root/shared')).stdout, 'before\n', 'writes after the fork are the fork\'s own');
        const rand = async (m: MachineHandle) => (await m.exec('head -c 16 /dev/urandom | od -An -tx1')).stdout;
        assert.notEqual(await rand(src), await rand(fork), 'random generators were reseeded');
        const clock = Number((await fork.exec('date +%s')).stdout);
        assert.ok(Math.abs(clock - Date.now() / 1000) < 10, 'the fork\'s clock is now');
        assert.equal((await fork.info()).snapshot?.startsWith('s_'), true);
      } finally {
        await fork.remove();
      }
    } finally {
      await src.remove();
    }
  });

  test('a systemd service and an exposed port survive a fork; the fork answers on its own URL; a request wakes a hibernated machine', async () => {
    const src = await t.sb.machines.create({ idleTimeoutMs: 2000 });
    try {
      // python3 needs ~10 s to listen under TCG: wait for its socket in the guest.
      const started = await src.exec('mkdir -p /srv && echo source > /srv/who && systemd-run --unit=web --property=WorkingDirectory=/srv python3 -m http.server 8080 && '
        + 'for i in $(seq 240); do grep -q ":1F90 00000000:0000 0A" /proc/net/tcp /proc/net/tcp6 && break; sleep 0.25; done; systemctl is-active web');
      assert.equal(started.stdout.trim(), 'active', started.stderr);
      const { pathUrl } = await src.expose(8080);
      const get = async (url: string) => (await fetch(`${url}who`)).text();
      assert.equal(await get(pathUrl), 'source\n');
      const [fork] = await src.fork(1);
      try {
        assert.equal((await fork.exec('systemctl is-active web')).stdout.trim(), 'active');
        await fork.exec('echo fork > /srv/who');
        const forkUrl = (await fork.info()).ports.find((p) => p.port === 8080)!.pathUrl;
        assert.notEqual(forkUrl, pathUrl);
        assert.equal(await get(forkUrl), 'fork\n');
        assert.equal(await get(pathUrl), 'source\n');
      } finally {
        await fork.remove();
      }
      for (let i = 0; (await src.info()).state !== 'hibernated'; i++) { assert.ok(i < 100); await sleep(100); }
      assert.equal(await get(pathUrl), 'source\n', 'the request woke it');
      assert.equal((await src.info()).state, 'running');
    } finally {
      await src.remove();
    }
  });

  test('an idle machine hibernates (memory to disk, QEMU gone) and the next exec wakes it with its processes', async () => {
    const m = await t.sb.machines.create({ idleTimeoutMs: 1000 });
    try {
      await m.exec(COUNTER);
      await sleep(300);
      const pid = (await m.exec('pgrep -f "echo \\$i" | head -1')).stdout.trim();
      const before = await counter(m);
      for (let i = 0; (await m.info()).state !== 'hibernated'; i++) {
        assert.ok(i < 100, 'it hibernates within ~10 s of idling');
        await sleep(100);
      }
      assert.equal(qemus(t.home).length, 0, 'no QEMU runs for a hibernated machine');
      const after = await counter(m); // wakes it
      assert.equal((await m.info()).state, 'running');
      assert.ok(after >= before, `the counter went on from ${before} (now ${after})`);
      assert.equal((await m.exec('pgrep -f "echo \\$i" | head -1')).stdout.trim(), pid, 'the same process');
    } finally {
      await m.remove();
    }
  });

  test('pause stops the CPUs, resume goes on; a stopped machine refuses exec; delete leaves no process or file', async () => {
    const m = await t.sb.machines.create();
    const uptime = async () => Number((await m.exec('cut -d" " -f1 /proc/uptime')).stdout);
    const [u1, t1] = [await uptime(), Date.now()];
    assert.equal((await m.pause()).state, 'paused');
    await assert.rejects(m.exec('true'), (e: Error & { code?: string }) => e.code === 'failed_precondition' && /paused/.test(e.message));
    await sleep(3000);
    assert.equal((await m.resume()).state, 'running');
    const [u2, t2] = [await uptime(), Date.now()];
    assert.ok(u2 - u1 < (t2 - t1) / 1000 - 2, `the guest's clock stood still while paused (guest ${u2 - u1} s, host ${(t2 - t1) / 1000} s)`);
    await m.exec('echo kept > /root/kept');
    assert.equal((await m.stop()).state, 'stopped');
    await assert.rejects(m.exec('true'), (e: Error & { code?: string }) => e.code === 'failed_precondition');
    assert.equal(qemus(t.home).length, 0);
    await m.remove();
    await assert.rejects(m.info(), (e: Error & { code?: string }) => e.code === 'not_found');
    assert.deepEqual(readdirSync(path.join(t.home, 'machines', 'run')), []);
    assert.deepEqual(readdirSync(path.join(t.home, 'machines', 'ram')), []);
    assert.deepEqual(readdirSync(path.join(t.home, 'machines', 'tenants', 't_admin', 'disks')), []);
  });

  test('snapshot, then restore: the copy has the memory of the moment; the usage ledger counts machine seconds', async () => {
    const m = await t.sb.machines.create();
    let copy: MachineHandle | undefined;
    try {
      await m.exec('echo at-snapshot > /dev/shm/mem-only');
      const snap = await m.snapshot();
      await m.exec('echo later > /dev/shm/mem-only');
      await m.stop();
      [copy] = await t.sb.machines.restore(snap, 1);
      assert.equal((await copy.exec('cat /dev/shm/mem-only')).stdout, 'at-snapshot\n', 'tmpfs content lives only in RAM');
      assert.ok((await t.sb.machines.snapshots()).some((s) => s.id === snap));
      const usage = await t.sb.usage({ groupBy: 'kind' });
      const machine = usage.items.find((i) => i.key === 'machine');
      assert.ok(machine && machine.machineSeconds > 0, JSON.stringify(usage.items));
      assert.ok(Math.abs(machine.machineMbSeconds - machine.machineSeconds * 512) < 1, 'memory-seconds: 512 MiB for each second');
      assert.ok(usage.total.bytesStored > 50 << 20, `the snapshot's memory counts as stored (${usage.total.bytesStored})`);
      await t.sb.machines.deleteSnapshot(snap);
      await assert.rejects(t.sb.machines.restore(snap), (e: Error & { code?: string }) => e.code === 'not_found');
      assert.ok((await t.sb.usage()).total.bytesStored < usage.total.bytesStored - (50 << 20), 'and stops counting once deleted');
    } finally {
      await copy?.remove();
      await m.remove();
    }
  });

  test('a machine of a context version boots that tree (ids as the sandbox sees them)', async () => {
    const ctx = t.sb.context('machine-src');
    // One version for this test and the next (a version's first machine boots its template once).
    await ctx.exec('useradd -m alice && echo from-context > /home/alice/note && chown alice /home/alice/note; echo old > /root/modified; echo doomed > /root/deleted; mkdir -p /srv/keep');
    const m = await t.sb.machines.create({ context: 'machine-src' });
    try {
      const info = await m.info();
      assert.equal(info.context, 'machine-src');
      assert.equal(info.version, (await ctx.info()).head);
      assert.equal((await m.exec('cat /home/alice/note; stat -c %U /home/alice/note; su alice -c whoami')).stdout, 'from-context\nalice\nalice\n');
    } finally {
      await m.remove();
    }
  });

  test('commit: only what the machine changed becomes a version of a context (new, modified, deleted, ids kept)', async () => {
    const ctx = t.sb.context('machine-src');
    const m = await t.sb.machines.create({ context: 'machine-src' });
    try {
      await m.exec('echo new > /root/modified; rm /root/deleted; useradd bob; echo hi > /srv/keep/bob.txt; chown bob /srv/keep/bob.txt; echo mem > /tmp/not-committed');
      const version = await m.commit('machine-src');
      assert.equal((await ctx.info()).head, version);
      const [v] = await ctx.versions({ limit: 1 });
      assert.equal(v.cause.kind, 'machine');
      const r = await ctx.exec('cat /root/modified; test -e /root/deleted || echo deleted; stat -c %U /srv/keep/bob.txt; test -e /tmp/not-committed || echo tmp-skipped', { commit: 'never' });
      assert.equal(r.stdout, 'new\ndeleted\nbob\ntmp-skipped\n');
      const diff = await ctx.diff();
      const paths = diff.changes.map((c) => c.path);
      assert.ok(paths.includes('/root/modified') && paths.includes('/root/deleted'), JSON.stringify(paths));
      assert.ok(!paths.some((p) => p.startsWith('/usr/bin')), 'untouched files do not travel');
    } finally {
      await m.remove();
    }
  });

  test("garbage collection deletes a version's template once no machine stands on it and nobody used it for a while", async () => {
    const tenants = path.join(t.home, 'machines', 'tenants');
    const [root] = readdirSync(tenants).map((id) => path.join(tenants, id, 'templates')).filter((d) => existsSync(d));
    const [template] = readdirSync(root);
    assert.ok(template, 'the tests above built one template of machine-src');
    const gc = async () => (await t.http('POST', '/v1/gc')).json.templatesDeleted as number;
    const age = () => { const old = new Date(Date.now() - 2 * 86_400_000); utimesSync(path.join(root, template, 'info.json'), old, old); };
    assert.equal(await gc(), 0, 'no machine stands on it, but the last test used it a moment ago: kept as a cache');
    // A machine of that version stands on it (the template's restore is quick: no boot).
    const [, before] = await t.sb.context('machine-src').versions({ limit: 2 });
    const m = await t.sb.machines.create({ context: 'machine-src', version: before.id });
    mkdirSync(path.join(root, `${template}x.building-1`)); // what a crash during a build leaves
    age();
    assert.equal(await gc(), 0);
    assert.ok(existsSync(path.join(root, template, 'disk.qcow2')), 'kept while a machine stands on it');
    assert.ok(!existsSync(path.join(root, `${template}x.building-1`)), 'a dead build is cleared');
    assert.equal((await m.exec('cat /home/alice/note')).stdout, 'from-context\n');
    await m.remove();
    assert.equal(await gc(), 1, 'unused for two days and nothing stands on it');
    assert.deepEqual(readdirSync(root), []);
  });

  test('a server restart hibernates running machines; they wake with their processes; a crash stops them', async () => {
    const m = await t.sb.machines.create();
    await m.exec(COUNTER);
    await sleep(300);
    const before = await counter(m);
    const { config } = t;
    await t.server.close();
    assert.equal(qemus(t.home).length, 0);
    t.server = await startServer(config, pino({ level: 'silent' }));
    t.sb = new Shellbase({ url: t.server.url, apiKey: t.key });
    const again = t.sb.machines.get(m.id);
    assert.equal((await again.info()).state, 'hibernated');
    assert.ok(await counter(again) >= before, 'the counter survived the restart');
    // A crash: the server dies with SIGKILL; QEMU and its bridges follow it, the disk stays.
    await t.server.close();
    const spawned = await spawnServer(t.home);
    const crashed = spawned.sb.machines.get(m.id);
    await crashed.exec('echo on-disk > /root/kept; sync');
    assert.equal(qemus(t.home).length, 1);
    spawned.child.kill('SIGKILL');
    await new Promise((r) => spawned.child.once('exit', r));
    for (let i = 0; qemus(t.home).length > 0; i++) { assert.ok(i < 50, 'QEMU dies with the server'); await sleep(100); }
    t.server = await startServer(config, pino({ level: 'silent' }));
    t.sb = new Shellbase({ url: t.server.url, apiKey: t.key });
    assert.equal((await t.sb.machines.get(m.id).info()).state, 'stopped', 'its memory is gone; the machine says so');
    await t.sb.machines.get(m.id).remove();
  });

  test('the CLI: machine create, exec (exit code passed on), fork, ls, rm', async () => {
    const env = { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
    const cli = async (...args: string[]) => {
      try { return { code: 0, ...(await run(process.execPath, [CLI, 'machine', ...args], { env })) }; } catch (e) { return e as { code: number; stdout: string; stderr: string }; }
    };
    const id = (await cli('create')).stdout.trim();
    assert.match(id, /^m_\w+$/);
    const r = await cli('exec', id, '--', 'echo out; echo err >&2; exit 4');
    assert.deepEqual([r.code, r.stdout, r.stderr], [4, 'out\n', 'err\n']);
    const fork = (await cli('fork', id)).stdout.trim();
    assert.match(fork, /^m_\w+$/);
    assert.match((await cli('ls')).stdout, new RegExp(`${fork}\\s+running`));
    for (const m of [fork, id]) assert.equal((await cli('rm', m)).code, 0);
    assert.equal((await cli('ls')).stdout, '');
  });

  test('bad input: unknown or foreign machines, counts and memory over the caps, ports of the agent, corrupt snapshots', async () => {
    const other = await t.sb.tenants.create('machines-other');
    const theirs = new Shellbase({ url: t.server.url, apiKey: other.apiKey });
    for (const [method, url, body, status] of [
      ['GET', '/v1/machines/m_nope', undefined, 404],
      ['GET', '/v1/machines/..%2f..', undefined, 404],
      ['POST', '/v1/machines', { memoryMb: 64 }, 400],
      ['POST', '/v1/machines', { memoryMb: 1 << 20 }, 400],
      ['POST', '/v1/machines', { cpus: 0 }, 400],
      ['POST', '/v1/machines', { version: 'v_x' }, 400],
      ['POST', '/v1/machines', { context: 'no/such' }, 400],
      ['POST', '/v1/snapshots/s_nope/machines', { count: 1 }, 404],
    ] as const) {
      const r = await t.http(method, url, { body });
      assert.equal(r.status, status, `${method} ${url} ${JSON.stringify(body)}: ${r.text}`);
      assert.ok(r.json?.error?.code, r.text);
    }
    const m = await t.sb.machines.create();
    try {
      await assert.rejects(theirs.machines.get(m.id).exec('true'), (e: Error & { code?: string }) => e.code === 'not_found');
      assert.equal((await t.http('POST', `/v1/machines/${m.id}/fork`, { body: { count: 1000 } })).status, 400);
      const big = await t.http('POST', `/v1/machines/${m.id}/fork`, { body: { count: 8 } });
      assert.equal(big.status, 429, big.text);
      assert.equal((await t.http('POST', `/v1/machines/${m.id}/ports`, { body: { port: 7000 } })).status, 400);
      // A machine without a display (not the desktop image) says so for its screen and its input.
      for (const [method, what, body] of [['GET', 'screen', undefined], ['POST', 'input', { type: 'move', x: 1, y: 1 }]] as const) {
        const none = await t.http(method, `/v1/machines/${m.id}/${what}`, { body });
        assert.equal(none.status, 412, none.text);
        assert.equal(none.json.error.code, 'failed_precondition');
        assert.match(none.json.error.hint, /desktop image/);
      }
      const budget = t.config.machines.memoryBudgetMb;
      t.config.machines.memoryBudgetMb = 700;
      try {
        const over = await t.http('POST', '/v1/machines', { body: { memoryMb: 512 } });
        assert.equal(over.status, 429, over.text);
        assert.match(over.json.error.message, /memory budget/);
      } finally {
        t.config.machines.memoryBudgetMb = budget;
      }
      const snap = await m.snapshot();
      const dir = path.join(t.home, 'machines', 'tenants', 't_admin', 'snapshots', snap);
      writeFileSync(path.join(dir, 'state.bin'), 'not a QEMU stream');
      const bad = await t.http('POST', `/v1/snapshots/${snap}/machines`, { body: { count: 1 } });
      assert.equal(bad.status, 503, bad.text);
      assert.equal((await t.sb.machines.list()).length, 1, 'nothing half-created');
      assert.equal(qemus(t.home).length, 1, 'no orphaned QEMU');
      rmSync(path.join(dir, 'ram'));
      const gone = await t.http('POST', `/v1/snapshots/${snap}/machines`, { body: { count: 1 } });
      assert.equal(gone.status, 412, gone.text);
      // Taken by another QEMU build: refused before anything starts.
      const db = new Database(path.join(t.home, 'meta.db'));
      db.prepare(`UPDATE machine_snapshots SET spec = json_set(spec, '$.qemu', 'QEMU emulator version 0.1') WHERE id = ?`).run(snap);
      db.close();
      const other = await t.http('POST', `/v1/snapshots/${snap}/machines`, { body: { count: 1 } });
      assert.equal(other.status, 412, other.text);
      assert.match(other.json.error.message, /QEMU emulator version 0\.1/);
    } finally {
      await m.remove();
    }
  });
});

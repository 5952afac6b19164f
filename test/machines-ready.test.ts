import assert from 'node:assert/strict';
import { readFileSync, readdirSync, rmSync, mkdtempSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Shellbase, type MachineHandle } from '@shellbase/sdk';
import { qemuProcesses, sleep, spawnServer, startTestServer, type TestServer } from './harness.ts';

/**
 * A create from a hot template takes a machine restored ahead (machines/pool/ready.ts)
 * instead of restoring one. What it gets must be what a restore gives: the template's files, a
 * clock of now, its own entropy, QEMU confined alike, the machine's own egress policy. At most
 * three VMs at once; the template is booted once under TCG.
 */
const UPSTREAM = '127.0.0.2';

describe('machines: ready VMs per hot template', { timeout: 900_000 }, () => {
  let t: TestServer;
  let upstream: Server;
  let port = 0;

  before(async () => {
    upstream = createServer((req, res) => res.end(`upstream says hi to ${req.url}\n`));
    await new Promise<void>((r) => upstream.listen(0, UPSTREAM, r));
    port = (upstream.address() as AddressInfo).port;
    t = await startTestServer({
      egress: { default: { egress: 'public' }, allowCidrs: [`${UPSTREAM}/32`], hosts: { 'api.example.test': UPSTREAM }, maxPerSandbox: 16, maxPerTenant: 1024, logDays: 7 },
    });
    t.config.machines.readyPerTemplate = 1;
  });
  after(async () => {
    await t?.close();
    upstream?.close();
  });

  const stats = () => t.server.machines.readyStats;
  const untilReady = async (n: number) => {
    for (let i = 0; stats().ready !== n; i++) { assert.ok(i < 600, `${n} ready machines after 60 s (${JSON.stringify(stats())})`); await sleep(100); }
  };
  /** Every template goes cold: no ready machine is left (each test starts with none). */
  const cool = async () => {
    const idle = t.config.machines.readyIdleMs;
    t.config.machines.readyIdleMs = 1;
    try {
      for (let i = 0; stats().ready !== 0 || qemuProcesses(t.home).length !== 0; i++) { assert.ok(i < 600, `templates cold after 60 s (${JSON.stringify(stats())})`); await sleep(100); }
    } finally {
      t.config.machines.readyIdleMs = idle;
    }
  };
  const out = async (m: MachineHandle, command: string) => {
    const r = await m.exec(command, { timeoutMs: 60_000 });
    assert.equal(r.exitCode, 0, `${command}: ${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  /** Its QEMU's confinement: the jail's and QEMU's command lines with the machine's id left out, and QEMU's credentials. */
  const confinement = (id: string) => {
    const [pid] = qemuProcesses(t.home, `${id}.ram`);
    assert.ok(pid, `the QEMU of ${id}`);
    const cmd = (p: string) => readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').join(' ').replaceAll(id, 'ID').replace(/-d_[a-z0-9]+\.qcow2/g, '-DISK.qcow2').replace(/\/e_[a-z0-9]+(?=[/ ])/g, '/SESSION');
    const status = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').filter((l) => /^(Uid|Gid|CapEff|CapBnd|NoNewPrivs|Seccomp):/.test(l));
    const ppid = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]!;
    return { qemu: cmd(pid), jail: cmd(ppid), status };
  };

  test('a create from a hot template takes a machine restored ahead: the same files, confinement and systemd as a restored one; its own clock and egress policy; another tenant\'s create does not get it', async () => {
    const restored = await t.sb.machines.create();
    const ms: MachineHandle[] = [restored];
    try {
      assert.deepEqual(stats(), { taken: 0, missed: 1, ready: stats().ready }, 'the first create restored (nothing was hot)');
      await untilReady(1);
      const qemus = qemuProcesses(t.home).length;
      assert.equal(qemus, 2, 'the ready machine is a QEMU of its own');

      // Another tenant's create from the same image restores its own (and makes the image hot for it).
      const bob = new Shellbase({ url: t.server.url, apiKey: (await t.http('POST', '/v1/tenants', { body: { name: 'bob' } })).json.apiKey });
      const theirs = await bob.machines.create();
      assert.deepEqual([stats().taken, stats().missed], [0, 2], 'bob\'s create did not take the admin\'s ready machine');
      await theirs.remove();
      await untilReady(2); // the admin's and bob's
      await sleep(6_000); // the ready machine's clock stood still this long: the take sets it to now
      const before = Date.now();
      const ready = await t.sb.machines.create();
      ms.push(ready);
      assert.equal(stats().taken, 1, 'the second create took the ready machine');
      await untilReady(2); // made again for the next create
      const none = await t.sb.machines.create({ network: { egress: 'none' } });
      ms.push(none);
      assert.equal(stats().taken, 2);

      const same = 'systemctl is-system-running; cat /etc/os-release | sha256sum; ls -la --time-style=+ /root /etc/systemd/system | sha256sum; id; hostname';
      assert.equal(await out(ready, same), await out(restored, same), 'the template\'s files and system, as restored');
      assert.deepEqual(confinement(ready.id), confinement(restored.id), 'QEMU confined as a restored machine\'s');
      const clock = Number(await out(ready, 'date +%s%3N'));
      assert.ok(Math.abs(clock - Date.now()) < 4_000 && clock >= before - 1_000, `the guest's clock is now (${clock} vs ${Date.now()})`);

      const url = `http://api.example.test:${port}/hi`;
      assert.equal(await out(ready, `curl -sS ${url}`), 'upstream says hi to /hi\n', 'the ready machine\'s session got its (public) policy');
      assert.equal(await out(none, `curl -s -o /dev/null -w '%{http_code}\\n' --max-time 10 ${url}`), '403\n', 'the other one\'s session refuses: its policy is none');

      const [fork] = await ready.fork(1);
      ms.push(fork);
      assert.equal(await out(fork, 'cat /etc/hostname && echo forked'), `${(await out(ready, 'cat /etc/hostname'))}forked\n`);
    } finally {
      for (const m of ms) await m.remove().catch(() => undefined);
      await cool();
    }
  });

  test('a ready machine whose QEMU dies after its create took it gives way to a restore of its template: the create still answers', async () => {
    const a = await t.sb.machines.create();
    const ms: MachineHandle[] = [a];
    let pid: string | undefined;
    let creating: Promise<MachineHandle> | undefined;
    try {
      await untilReady(1);
      [pid] = qemuProcesses(t.home).filter((p) => !qemuProcesses(t.home, `${a.id}.ram`).includes(p));
      assert.ok(pid, 'the ready machine\'s QEMU');
      const readyId = /\/(m_[a-z0-9]+)\.ram/.exec(readFileSync(`/proc/${pid}/cmdline`, 'utf8'))?.[1];
      assert.ok(readyId, 'the ready machine\'s id, from its RAM file');
      const readyDisk = readdirSync(path.join(t.home, 'machines', 'tenants', 't_admin', 'disks')).find((f) => f.startsWith(`${readyId}-`));
      assert.ok(readyDisk, 'the ready machine\'s disk');
      const readyDiskBorn = statSync(path.join(t.home, 'machines', 'tenants', 't_admin', 'disks', readyDisk)).birthtimeMs;
      assert.ok(readyDiskBorn > 0, 'the file system keeps birth times');
      // Stopped, it is still alive when taken; killed once taken, its take-over fails half-way.
      process.kill(Number(pid), 'SIGSTOP');
      const taken = stats().taken;
      creating = t.sb.machines.create();
      for (let i = 0; stats().taken === taken; i++) { assert.ok(i < 600, 'the create took the ready machine'); await sleep(20); }
      process.kill(Number(pid), 'SIGKILL');
      const b = await creating;
      ms.push(b);
      assert.equal(b.id, readyId, 'the machine keeps the id its create took');
      const same = 'systemctl is-system-running; cat /etc/os-release | sha256sum; ls -la --time-style=+ /root /etc/systemd/system | sha256sum; hostname';
      assert.equal(await out(b, same), await out(a, same), 'restored from the template');
      const disk = readdirSync(path.join(t.home, 'machines', 'tenants', 't_admin', 'disks')).filter((f) => f.startsWith(`${readyId}-`));
      assert.equal(disk.length, 1, `one disk file of the machine: ${disk.join(' ')}`);
      assert.ok(statSync(path.join(t.home, 'machines', 'tenants', 't_admin', 'disks', disk[0]!)).birthtimeMs > readyDiskBorn, 'a fresh overlay, not the ready machine\'s');
      assert.ok(!qemuProcesses(t.home).includes(pid), 'the dead ready machine\'s QEMU is gone');
    } finally {
      if (pid) try { process.kill(Number(pid), 'SIGKILL'); } catch { /* gone */ }
      await creating?.catch(() => undefined);
      for (const m of ms) await m.remove().catch(() => undefined);
      await cool();
    }
  });

  test('a create at the budget\'s edge takes the ready machine; one over a tenant\'s quota leaves it; a fork that needs its room ends it; a cold template\'s ends too; none is left behind', async () => {
    const a = await t.sb.machines.create();
    const tight = async (f: () => Promise<void>) => {
      const { memoryBudgetMb: budget } = t.config.machines;
      const { runningMachines } = t.config.quotas;
      t.config.machines.memoryBudgetMb = 1100; // a and one more machine of 512 MiB, not a third
      try { await f(); } finally { t.config.machines.memoryBudgetMb = budget; t.config.quotas.runningMachines = runningMachines; }
    };
    try {
      await untilReady(1);
      await tight(async () => {
        const taken = stats().taken;
        const b = await t.sb.machines.create();
        assert.equal(stats().taken, taken + 1, 'admission did not count the ready machine b took twice');
        await b.remove();
      });
      // None was made after b (no room for it and one more): the next create makes one again.
      assert.equal(stats().ready, 0);
      await t.sb.machines.create().then((c) => c.remove());
      await untilReady(1);
      await tight(async () => {
        t.config.quotas.runningMachines = 1;
        await assert.rejects(t.sb.machines.create(), (e: Error & { code?: string }) => e.code === 'limit_exceeded' && /runningMachines/.test(e.message));
        assert.equal(stats().ready, 1, 'a create over the tenant\'s quota leaves the ready machine be');
        t.config.quotas.runningMachines = 4;
        const [fork] = await a.fork(1);
        assert.equal(stats().ready, 0, 'the fork needed the ready machine\'s room: it ended');
        assert.equal(await out(fork, 'echo fork'), 'fork\n');
        await fork.remove();
      });
      await t.sb.machines.create().then((c) => c.remove()); // hot again: one is made
      await untilReady(1);
      const idle = t.config.machines.readyIdleMs;
      t.config.machines.readyIdleMs = 500;
      try {
        await untilReady(0);
      } finally {
        t.config.machines.readyIdleMs = idle;
      }
      for (let i = 0; qemuProcesses(t.home).length !== 1; i++) { assert.ok(i < 100, 'the cold template\'s ready QEMU ended'); await sleep(100); }
      // A discarded VM's files go right after its QEMU ended (in the background): given a few seconds.
      const runDirs = () => readdirSync(path.join(t.home, 'machines', 'run'));
      for (let i = 0; runDirs().length !== 1; i++) { if (i === 50) assert.deepEqual(runDirs(), [a.id], 'only a\'s run directory'); await sleep(100); }
      assert.deepEqual(runDirs(), [a.id], 'only a\'s run directory');
      assert.deepEqual(readdirSync(path.join(t.home, 'machines', 'ram')), [`${a.id}.ram`], 'only a\'s RAM file');
      const disks = readdirSync(path.join(t.home, 'machines', 'tenants', 't_admin', 'disks'));
      assert.ok(disks.every((f) => f.startsWith(`${a.id}-`)), `only a's disk files: ${disks.join(' ')}`);
      const sessions = () => readdirSync(path.join(t.home, 'egress')).filter((d) => d.startsWith('e_')).length;
      for (let i = 0; sessions() !== 1; i++) { assert.ok(i < 50, `only a's egress session (${sessions()})`); await sleep(100); } // removed in the background
    } finally {
      await a.remove();
    }
  });

  test('a crash leaves a ready machine\'s QEMU and files behind only until the next start', async () => {
    const home = mkdtempSync(path.join(tmpdir(), 'shellbase-ready-'));
    try {
      let s = await spawnServer(home, { env: { SHELLBASE_MACHINES_READY: '1' } });
      const m = await s.sb.machines.create();
      await m.exec('echo kept > /root/kept');
      const snap = await m.snapshot();
      const h = await s.sb.machines.create();
      await h.exec('echo asleep > /root/asleep');
      await h.hibernate();
      for (let i = 0; qemuProcesses(home).length < 2; i++) { assert.ok(i < 600, 'a ready machine after 60 s'); await sleep(100); }
      s.child.kill('SIGKILL');
      await new Promise((r) => s.child.once('exit', r));
      for (let i = 0; qemuProcesses(home).length > 0; i++) { assert.ok(i < 100, 'QEMU dies with the server'); await sleep(100); }
      const disks = path.join(home, 'machines', 'tenants', 't_admin', 'disks');
      const run = path.join(home, 'machines', 'run');
      const before = { run: readdirSync(run).sort(), disks: readdirSync(disks).sort() };
      const ready = before.run.filter((d) => d !== m.id && d !== h.id);
      assert.equal(ready.length, 1, `m's, h's and the ready machine's run directories: ${before.run.join(' ')}`);
      assert.equal(before.disks.filter((f) => f.startsWith(`${ready[0]}-`)).length, 1, 'and the ready machine\'s disk');
      s = await spawnServer(home, { env: { SHELLBASE_MACHINES_READY: '0' } });
      try {
        assert.equal((await s.sb.machines.get(m.id).info()).state, 'stopped', 'a crash stops a machine');
        assert.deepEqual(readdirSync(run).sort(), before.run.filter((d) => d !== ready[0]), 'only the ready machine\'s run directory is gone');
        assert.deepEqual(readdirSync(disks).sort(), before.disks.filter((f) => !f.startsWith(`${ready[0]}-`)), 'and only its disk');
        assert.equal((await s.sb.machines.get(h.id).exec('cat /root/asleep')).stdout, 'asleep\n', 'the hibernated machine wakes');
        const [copy] = await s.sb.machines.restore(snap, 1);
        assert.equal((await copy.exec('cat /root/kept')).stdout, 'kept\n', 'the snapshot restores');
        for (const x of [copy!, s.sb.machines.get(h.id), s.sb.machines.get(m.id)]) await x.remove();
        await s.sb.machines.deleteSnapshot(snap);
      } finally {
        s.child.kill('SIGTERM');
        await new Promise((r) => s.child.once('exit', r));
      }
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

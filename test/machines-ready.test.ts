import assert from 'node:assert/strict';
import { readFileSync, readdirSync, rmSync, mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { MachineHandle } from '@shellbase/sdk';
import { qemuProcesses, sleep, spawnServer, startTestServer, type TestServer } from './harness.ts';

/**
 * Issue 23: a create from a hot template takes a machine restored ahead (machines/ready.ts)
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

  test('a create from a hot template takes a machine restored ahead: the same files, confinement and systemd as a restored one; its own clock, entropy and egress policy', async () => {
    const restored = await t.sb.machines.create();
    const ms: MachineHandle[] = [restored];
    try {
      assert.deepEqual(stats(), { taken: 0, missed: 1, ready: stats().ready }, 'the first create restored (nothing was hot)');
      await untilReady(1);
      const qemus = qemuProcesses(t.home).length;
      assert.equal(qemus, 2, 'the ready machine is a QEMU of its own');

      await sleep(6_000); // the ready machine's clock stood still this long: the take sets it to now
      const before = Date.now();
      const ready = await t.sb.machines.create();
      ms.push(ready);
      assert.equal(stats().taken, 1, 'the second create took the ready machine');
      await untilReady(1); // made again for the next create
      const none = await t.sb.machines.create({ network: { egress: 'none' } });
      ms.push(none);
      assert.equal(stats().taken, 2);

      const same = 'systemctl is-system-running; cat /etc/os-release | sha256sum; ls -la --time-style=+ /root /etc/systemd/system | sha256sum; id; hostname';
      assert.equal(await out(ready, same), await out(restored, same), 'the template\'s files and system, as restored');
      assert.deepEqual(confinement(ready.id), confinement(restored.id), 'QEMU confined as a restored machine\'s');
      const clock = Number(await out(ready, 'date +%s%3N'));
      assert.ok(Math.abs(clock - Date.now()) < 4_000 && clock >= before - 1_000, `the guest's clock is now (${clock} vs ${Date.now()})`);
      const entropy = await Promise.all(ms.map((m) => out(m, 'head -c 16 /dev/urandom | od -An -tx1')));
      assert.equal(new Set(entropy).size, 3, `each machine's own random state: ${entropy.join(' ')}`);

      const url = `http://api.example.test:${port}/hi`;
      assert.equal(await out(ready, `curl -sS ${url}`), 'upstream says hi to /hi\n', 'the ready machine\'s session got its (public) policy');
      assert.equal(await out(none, `curl -s -o /dev/null -w '%{http_code}\\n' --max-time 10 ${url}`), '403\n', 'the other one\'s session refuses: its policy is none');

      const [fork] = await ready.fork(1);
      ms.push(fork);
      assert.equal(await out(fork, 'cat /etc/hostname && echo forked'), `${(await out(ready, 'cat /etc/hostname'))}forked\n`);
    } finally {
      for (const m of ms) await m.remove().catch(() => undefined);
    }
  });

  test('a ready machine gives its room to a start that needs it, and ends once its template is cold; none is left behind', async () => {
    const a = await t.sb.machines.create();
    try {
      await untilReady(1);
      const budget = t.config.machines.memoryBudgetMb;
      t.config.machines.memoryBudgetMb = 1100; // a and one more machine of 512 MiB: not the ready one too
      try {
        const missed = stats().missed;
        const b = await t.sb.machines.create();
        assert.equal(stats().missed, missed + 1, 'the ready machine gave its room up, and b was restored');
        assert.equal(await out(b, 'echo b'), 'b\n');
        await b.remove();
      } finally {
        t.config.machines.memoryBudgetMb = budget;
      }
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
      assert.deepEqual(readdirSync(path.join(t.home, 'machines', 'run')), [a.id], 'only a\'s run directory');
      assert.deepEqual(readdirSync(path.join(t.home, 'machines', 'ram')), [`${a.id}.ram`], 'only a\'s RAM file');
    } finally {
      await a.remove();
    }
  });

  test('a crash leaves a ready machine\'s QEMU and files behind only until the next start', async () => {
    const home = mkdtempSync(path.join(tmpdir(), 'shellbase-ready-'));
    try {
      let s = await spawnServer(home, { env: { SHELLBASE_MACHINES_READY: '1' } });
      const m = await s.sb.machines.create();
      for (let i = 0; qemuProcesses(home).length < 2; i++) { assert.ok(i < 600, 'a ready machine after 60 s'); await sleep(100); }
      s.child.kill('SIGKILL');
      await new Promise((r) => s.child.once('exit', r));
      for (let i = 0; qemuProcesses(home).length > 0; i++) { assert.ok(i < 100, 'QEMU dies with the server'); await sleep(100); }
      const disks = path.join(home, 'machines', 'tenants', 't_admin', 'disks');
      assert.equal(readdirSync(path.join(home, 'machines', 'run')).length, 2, 'm\'s run directory and the ready machine\'s');
      assert.equal(readdirSync(disks).length, 2);
      s = await spawnServer(home, { env: { SHELLBASE_MACHINES_READY: '0' } });
      try {
        assert.equal((await s.sb.machines.get(m.id).info()).state, 'stopped', 'a crash stops a machine');
        assert.deepEqual(readdirSync(path.join(home, 'machines', 'run')), [m.id], 'the ready machine\'s run directory is gone');
        assert.equal(readdirSync(disks).length, 1, 'and its disk');
        await s.sb.machines.get(m.id).remove();
      } finally {
        s.child.kill('SIGTERM');
        await new Promise((r) => s.child.once('exit', r));
      }
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { MachineHandle } from '@shellbase/sdk';
import { sleep, startTestServer, type TestServer } from './harness.ts';

// Machines under TCG (no working KVM here): a restore takes seconds, not milliseconds. At most two
// VMs run at once. The first create on a fresh host builds the debian template (one boot, ~30-60 s).
const COUNTER = "setsid -f sh -c 'i=0; while true; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done' >/dev/null 2>&1";
const counter = async (m: MachineHandle) => Number((await m.exec('cat /run/counter')).stdout.trim());
/** QEMU processes serving this test server's home. */
const qemus = (home: string) => readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
  try { const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8'); return cmd.startsWith('qemu-system') && cmd.includes(home); } catch { return false; }
});

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
      const events = [];
      for await (const e of m.execStream(['bash', '-c', 'echo one; sleep 0.3; echo two'])) events.push(e);
      assert.deepEqual(events.filter((e) => e.type === 'stdout').map((e) => (e as { data: string }).data).join(''), 'one\ntwo\n');
      assert.equal(events.at(-1)?.type, 'exit');
      const big = await m.exec('head -c 100000 /dev/zero | tr "\\0" x', { limits: { outputBytes: 1000 } });
      assert.equal(big.stdout.length, 1000);
      assert.equal(big.truncated, true);
      const slow = await m.exec('sleep 30; echo late', { timeoutMs: 1000 });
      assert.equal(slow.timedOut, true);
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

  test('a systemd service and an exposed port survive a fork; the fork answers on its own URL', async () => {
    const src = await t.sb.machines.create();
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
    } finally {
      await src.remove();
    }
  });
});

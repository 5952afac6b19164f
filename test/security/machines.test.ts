import assert from 'node:assert/strict';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { qemuProcesses, startTestServer, type TestServer } from '../harness.ts';

/** The QEMU process of this server's one running machine (its inner pid, inside bwrap). */
function qemuPid(home: string): string {
  const pids = qemuProcesses(home);
  assert.equal(pids.length, 1);
  return pids[0];
}

describe('security: machines', { timeout: 600_000 }, () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('a guest reaches no network: not the host, not the internet, not DNS (only forwarded ports reach it)', async () => {
    const m = await t.sb.machines.create();
    try {
      const gw = new URL(t.server.url).port;
      const r = await m.exec([
        `for target in 10.0.2.2/${gw} 10.0.2.2/22 10.0.2.3/53 1.1.1.1/80 127.0.0.1/${gw}; do`,
        '  timeout 3 bash -c "exec 3<>/dev/tcp/$target" 2>/dev/null && echo "reached $target" || echo "refused $target";',
        'done'].join('\n'), { timeoutMs: 60_000 });
      assert.doesNotMatch(r.stdout, /reached/, r.stdout);
      assert.equal(r.stdout.trim().split('\n').length, 5);
    } finally {
      await m.remove();
    }
  });

  test('QEMU runs confined: no capabilities, no_new_privs, its own namespaces, only its own files, a memory cap', async () => {
    const m = await t.sb.machines.create();
    try {
      const pid = qemuPid(t.home);
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      assert.match(status, /^CapEff:\s+0+$/m, 'no effective capabilities');
      assert.match(status, /^CapPrm:\s+0+$/m, 'none permitted');
      assert.match(status, /^NoNewPrivs:\s+1$/m, 'and no exec gains any back (root\'s exec included)');
      const accel = (await (await fetch(`${t.server.url}/healthz`)).json() as { machines: { accel: string } }).machines.accel;
      if (accel === 'tcg') assert.match(status, /^Uid:\s+165536\s+165536\s+165536\s+165536$/m, 'not host root, nor the sandboxes\' root: an id of its own');
      for (const ns of ['net', 'pid', 'mnt', 'ipc', 'uts']) {
        assert.notEqual(readlinkSync(`/proc/${pid}/ns/${ns}`), readlinkSync(`/proc/self/ns/${ns}`), `its own ${ns} namespace`);
      }
      const root = `/proc/${pid}/root`;
      assert.deepEqual(readdirSync(root).filter((e) => !['usr', 'lib', 'lib64', 'bin', 'sbin', 'dev', 'proc', 'tmp', 'var', 'tmp'].includes(e)), [], 'nothing but /usr and its own files');
      assert.throws(() => readdirSync(`${root}/etc`), 'no /etc (no host configuration, no shadow file)');
      assert.throws(() => readFileSync(`${root}${t.home}/meta.db`), 'not the server\'s database');
      assert.throws(() => readFileSync(`${root}${t.home}/admin.key`), 'not the admin key');
      const cgroup = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
      const mem = /^\d+:memory:(.*)$/m.exec(cgroup)?.[1] ?? /^0::(.*)$/m.exec(cgroup)?.[1];
      assert.ok(mem?.includes('shellbase'), `in a shellbase cgroup (${cgroup})`);
    } finally {
      await m.remove();
    }
  });
});

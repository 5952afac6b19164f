import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from '../harness.ts';

// Threat: a query sees or touches the host: its processes, files, devices, kernel settings, network.
// Defence: pid/mount/ipc/uts/net/cgroup namespaces (the net one has only loopback; egress goes through the proxy, test/network.test.ts) in a user namespace, a minimal /dev, no /sys,
// a read-only /proc/sys, the overlay as the only file system, a capability subset, no_new_privs.
describe('security: nothing of the host is visible', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('the sandbox: namespaces, /dev, /tmp, capabilities, no_new_privs, no network', async () => {
    const r = await t.sb.context('iso').exec([
      'ps -e --no-headers | wc -l', 'hostname', 'echo $(ls /dev)', 'grep -E "^(NoNewPrivs|CapEff)" /proc/self/status',
      'cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d " "', 'test -e /sys/kernel && echo sys-visible || echo no-sys',
      'echo scratch > /tmp/t; mount | grep " /tmp " | cut -d" " -f5',
      'mknod /x c 1 1 2>&1 | head -1', 'curl -sS -m 2 --noproxy "*" http://1.1.1.1 2>&1 | head -1',
    ].join('; '));
    const lines = r.stdout.trim().split('\n');
    assert.ok(Number(lines[0]) <= 5, `only the query's own processes are visible: ${lines[0]}`);
    assert.equal(lines[1], 'sandbox');
    assert.deepEqual(lines[2].trim().split(' ').sort(),
      ['core', 'fd', 'full', 'null', 'ptmx', 'pts', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'tty', 'urandom', 'zero']);
    assert.equal(lines[3], 'CapEff:\t00000000800405fb', 'exactly the documented capability set');
    assert.equal(lines[4], 'NoNewPrivs:\t1');
    assert.equal(lines[5], 'lo', 'only loopback');
    assert.equal(lines[6], 'no-sys');
    assert.equal(lines[7], 'tmpfs');
    assert.match(lines[8], /Operation not permitted/);
    // Past the egress proxy (its only way out, under policy), the sandbox's own network reaches nothing.
    assert.match(lines[9], /(Could not resolve|connect|unreachable|Failed)/i);
    assert.equal(r.committed, false, 'writes to /tmp are not part of the context');
    const again = await t.sb.context('iso').exec('test -e /tmp/t && echo kept || echo gone');
    assert.equal(again.stdout, 'gone\n');
  });

  test('no host files, kernel settings or other sandboxes', async () => {
    const other = t.sb.context('neighbour').exec('sleep 3');
    const r = await t.sb.context('iso').exec([
      `test -e ${t.home} && echo home-visible || echo no-home`, 'test -e /work && echo work-visible || echo no-work',
      '(echo 1 > /proc/sys/vm/overcommit_memory) 2>&1 | head -1; cat /proc/sys/vm/overcommit_memory >/dev/null && echo sysctl-readable',
      '(echo 3 > /proc/sys/vm/drop_caches) 2>&1 | head -1',
      'ps -eo comm= | grep -c sleep',
      'mount -t tmpfs x /mnt 2>&1 | head -1',
      'ls /proc | grep -E "^[0-9]+$" | wc -l',
    ].join('; '), { commit: 'never' });
    const lines = r.stdout.trim().split('\n');
    assert.equal(lines[0], 'no-home', 'the data directory is not in the sandbox');
    assert.equal(lines[1], 'no-work');
    assert.match(lines[2], /Read-only file system|Permission denied/, 'kernel settings are read-only');
    assert.equal(lines[3], 'sysctl-readable');
    assert.match(lines[4], /Read-only file system|Permission denied/);
    assert.equal(lines[5], '0', "another query's processes are invisible");
    assert.match(lines[6], /permission denied|not permitted/i, 'no new mounts');
    assert.ok(Number(lines[7]) <= 6, `only the query's own processes in /proc: ${lines[7]}`);
    await other;
  });
});

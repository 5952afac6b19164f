import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from '../harness.ts';

// Threat: code that is root in its sandbox acts as root on the host.
// Defence: every sandbox is a user namespace mapping its ids 0..65535 to 100000..165535 on the host.
describe('security: root in a sandbox is not root on the host', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  /** Host stat of a path in the newest layer that has it. */
  const hostStat = (p: string) => {
    const dir = path.join(t.home, 'store', 'layers');
    const found = readdirSync(dir).filter((n) => !n.endsWith('.json'))
      .map((n) => path.join(dir, n, 'tree', p)).filter((f) => { try { statSync(f); return true; } catch { return false; } })
      .map((f) => statSync(f)).sort((a, b) => b.ctimeMs - a.ctimeMs);
    assert.ok(found.length, `${p} is in some layer`);
    return found[0];
  };

  test('inside it is uid 0 with working chown; on the host its files belong to 100000 and up', async () => {
    const r = await t.sb.context('ids').exec([
      'id -u', 'tr -s " " < /proc/self/uid_map', 'touch /root/mine /root/theirs', 'chown 1000:1001 /root/theirs',
      'setpriv --reuid=1000 --regid=1001 --clear-groups id -u', 'stat -c "%u %g %a" /usr/bin/su',
    ].join('; '));
    assert.equal(r.exitCode, 0, r.stderr);
    assert.deepEqual(r.stdout.trim().split('\n'), ['0', ' 0 100000 65536', '1000', '0 0 4755']);
    assert.equal(hostStat('root/mine').uid, 100_000);
    assert.deepEqual([hostStat('root/theirs').uid, hostStat('root/theirs').gid], [101_000, 101_001]);
    const s = await t.http('GET', '/v1/contexts/ids/stat/root/theirs');
    assert.deepEqual([s.json.uid, s.json.gid], [1000, 1001], 'the files API shows ids as the sandbox sees them');
  });

  test('host objects a sandbox can reach are not its own: /dev nodes cannot be changed', async () => {
    const before = statSync('/dev/null');
    const r = await t.sb.context('dev').exec('chmod 600 /dev/null 2>&1; chown 5 /dev/null 2>&1; stat -c "%u %a" /dev/null');
    const lines = r.stdout.trim().split('\n');
    assert.match(lines[0], /Operation not permitted/);
    assert.match(lines[1], /Operation not permitted/);
    assert.equal(lines[2], '65534 666', 'the host device node is owned by nobody the sandbox knows');
    const after = statSync('/dev/null');
    assert.deepEqual([after.mode, after.uid], [before.mode, before.uid]);
  });

  test('files the API writes or unpacks belong to the sandbox root or the archive owner', async () => {
    await t.sb.context('api').files.write('/srv/new/file.txt', 'x');
    const tarOf = (owner: number) => execFileSync('tar', ['-c', '--numeric-owner', `--owner=${owner}`, `--group=${owner}`, '-C', '/etc', 'hostname']);
    const put = (dir: string, body: Buffer) => fetch(`${t.server.url}/v1/contexts/api/files/srv/${dir}?format=tar`, {
      method: 'PUT', body, headers: { authorization: `Bearer ${t.key}` },
    }).then(async (res) => ({ status: res.status, text: await res.text() }));
    const up = await put('up', tarOf(1000));
    assert.equal(up.status, 200, up.text);
    const r = await t.sb.context('api').exec('stat -c "%n %u %g" /srv/new /srv/new/file.txt /srv/up/hostname');
    assert.equal(r.stdout, '/srv/new 0 0\n/srv/new/file.txt 0 0\n/srv/up/hostname 1000 1000\n');
    const refused = await put('bad', tarOf(70_000));
    assert.equal(refused.status, 400, 'an owner a sandbox cannot map is refused');
    assert.match(refused.text, /Cannot change ownership/);
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { fakeEngine, type FakeEngine } from './fake-engine.ts';

// Mounts over the in-memory backends: the commit-together rules without a host.
describe('fast tier: mounts', () => {
  let f: FakeEngine;
  before(async () => { f = await fakeEngine(); });
  after(async () => { await f?.close(); });

  const read = async (c: Awaited<ReturnType<FakeEngine['caller']>>, ctx: string, p: string, version?: string) => {
    const r = await f.engine.files.read(c, ctx, p, version);
    assert.ok(r.kind === 'file');
    return r.readAll().toString();
  };

  test('read-only shows the mounted version and refuses writes; writable commits both contexts together', async () => {
    const c = await f.caller();
    const v1 = (await f.engine.exec(c, 'vol', { command: 'echo one > /root/a' })).version;
    await f.engine.exec(c, 'vol', { command: 'echo two > /root/a' });
    const ro = await f.engine.exec(c, 'q', { command: 'cat /data/root/a && echo x > /data/root/b', mounts: [{ context: 'vol', path: '/data', readOnly: true, version: v1 }] });
    assert.equal(ro.stdout, 'one\n');
    assert.match(ro.stderr, /Read-only/);
    const rw = await f.engine.exec(c, 'q', { command: 'echo new > /data/root/n && echo mine > /root/m', mounts: [{ context: 'vol', path: '/data' }] });
    assert.ok(rw.committed && rw.mounts![0].committed);
    assert.equal(await read(c, 'vol', '/root/n'), 'new\n');
    assert.equal(await read(c, 'q', '/root/m'), 'mine\n');
    assert.equal((await f.engine.getContext(c, 'vol')).head, rw.mounts![0].version);
  });

  test('a conflict in the mount holds back the query\'s own commit; retry lands both', async () => {
    const c = await f.caller();
    const base = (await f.engine.exec(c, 'v2', { command: 'echo 0 > /root/n' })).version;
    const first = await f.engine.exec(c, 'q2', { command: 'echo 1 > /data/root/n', mounts: [{ context: 'v2', path: '/data' }] });
    assert.ok(first.mounts![0].committed);
    const head = (await f.engine.getContext(c, 'q2')).head;
    // Over the volume's older version (pinned), the same file: a conflict, and the query's own write waits too.
    const second = await f.engine.exec(c, 'q2', { command: 'echo 2 > /data/root/n && echo own > /root/own', mounts: [{ context: 'v2', path: '/data', version: base }] });
    assert.equal(second.committed, false);
    assert.deepEqual(second.conflict?.paths, ['/data/root/n']);
    assert.equal((await f.engine.getContext(c, 'q2')).head, head, 'the query\'s context did not move');
    assert.equal(await read(c, 'v2', '/root/n'), '1\n', 'the volume did not move');
    assert.equal(await read(c, 'q2', '/root/own', second.version === head ? second.conflict!.version : second.version), 'own\n', 'its own work is kept, unattached');
    const retried = await f.engine.exec(c, 'q2', { command: 'echo 3 > /data/root/n && echo own > /root/own', mounts: [{ context: 'v2', path: '/data' }], onConflict: 'retry' });
    assert.ok(retried.committed && retried.mounts![0].committed);
    assert.equal(await read(c, 'v2', '/root/n'), '3\n');
  });
});

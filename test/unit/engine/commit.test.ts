import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { fakeEngine, type FakeEngine } from './fake-engine.ts';

describe('fast tier: commit, rebase, conflict, retry', () => {
  let f: FakeEngine;
  before(async () => { f = await fakeEngine(); });
  after(async () => { await f?.close(); });

  test('a query over the head commits a version the files API reads', async () => {
    const c = await f.caller();
    const r = await f.engine.exec(c, 'a', { command: 'echo one > /root/one && cat /etc/motd' });
    assert.deepEqual([r.exitCode, r.stdout, r.committed], [0, 'hello\n', true]);
    assert.notEqual(r.version, r.baseVersion);
    const read = await f.engine.files.read(c, 'a', '/root/one');
    assert.ok(read.kind === 'file');
    assert.equal(read.readAll().toString(), 'one\n');
    const none = await f.engine.exec(c, 'a', { command: 'cat /root/one' });
    assert.deepEqual([none.committed, none.version], [false, r.version], 'a read-only query makes no version');
  });

  test('writers of disjoint paths from one base both commit (rebase)', async () => {
    const c = await f.caller();
    const base = (await f.engine.exec(c, 'b', { command: 'echo base > /root/base' })).version;
    const [x, y] = await Promise.all([
      f.engine.exec(c, 'b', { command: 'echo x > /root/x', version: base }),
      f.engine.exec(c, 'b', { command: 'echo y > /root/y', version: base }),
    ]);
    assert.ok(x.committed && y.committed);
    const names = (await f.engine.files.read(c, 'b', '/root'));
    assert.ok(names.kind === 'dir');
    assert.deepEqual(names.entries.map((e) => e.name), ['base', 'x', 'y']);
  });

  test('writers of one path from one base: the second is a conflict that loses nothing; retry commits it', async () => {
    const c = await f.caller();
    const base = (await f.engine.exec(c, 'c', { command: 'echo 0 > /root/n' })).version;
    const first = await f.engine.exec(c, 'c', { command: 'echo 1 > /root/n', version: base });
    const second = await f.engine.exec(c, 'c', { command: 'echo 2 > /root/n', version: base });
    assert.equal(first.committed, true);
    assert.equal(second.committed, false);
    assert.deepEqual(second.conflict?.paths, ['/root/n']);
    const kept = await f.engine.files.read(c, 'c', '/root/n', second.conflict!.version);
    assert.ok(kept.kind === 'file' && kept.readAll().toString() === '2\n', 'the conflicting work is readable');
    const retried = await f.engine.exec(c, 'c', { command: 'echo 3 > /root/n', version: base, onConflict: 'retry' });
    assert.deepEqual([retried.committed, retried.retries], [true, 1]);
  });

  test('deleting an image file is a whiteout the next version honours; diff and merge read through the snapshotter', async () => {
    const c = await f.caller();
    await f.engine.exec(c, 'd', { command: 'rm /etc/motd' });
    await assert.rejects(f.engine.files.read(c, 'd', '/etc/motd'), /does not exist/);
    await f.engine.fork(c, 'd', { name: 'd2' });
    await f.engine.exec(c, 'd2', { command: 'echo forked > /root/f' });
    const d = await f.engine.history.diff(c, 'd2', { path: '/root/f' });
    assert.deepEqual(d.changes, [{ path: '/root/f', kind: 'added', type: 'file', size: 7 }]);
    assert.equal(d.patch, '--- a/root/f\n+++ b/root/f\n@@ -0,0 +1 @@\n+forked\n');
    await f.engine.history.merge(c, 'd', 'd2');
    const merged = await f.engine.files.read(c, 'd', '/root/f');
    assert.ok(merged.kind === 'file' && merged.readAll().toString() === 'forked\n');
  });
});

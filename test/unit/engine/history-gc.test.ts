import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fakeEngine } from './fake-engine.ts';

test('fast tier: long chains are squashed in the background; content stays equal', async () => {
  const f = await fakeEngine({ squashAbove: 4 });
  try {
    const c = await f.caller();
    for (let i = 0; i < 12; i++) await f.engine.exec(c, 's', { command: `echo ${i} > /root/f${i % 5} && echo ${i} >> /root/log` });
    await f.engine.squasher.idle();
    const ctx = await f.engine.getContext(c, 's');
    const head = (await f.metadata.versions.get(ctx.head))!;
    assert.ok(head.layers.length <= 7, `squashed: ${head.layers.length} layers`);
    const log = await f.engine.files.read(c, 's', '/root/log');
    assert.ok(log.kind === 'file');
    assert.equal(log.readAll().toString(), Array.from({ length: 12 }, (_, i) => `${i}\n`).join(''));
  } finally {
    await f.close();
  }
});

test('fast tier: garbage collection drops old history and deletes layers no version uses', async () => {
  const f = await fakeEngine({ gc: { intervalMs: 3_600_000, retentionDays: 0, keepVersions: 1 } });
  try {
    const c = await f.caller();
    const layersOf = async (v: string) => (await f.metadata.versions.get(v))!.layers;
    await f.engine.exec(c, 'g', { command: 'echo 1 > /root/a' });
    await f.engine.exec(c, 'g', { command: 'echo 2 > /root/a' });
    const shared = await f.engine.exec(c, 'g', { command: 'echo 3 > /root/b' });
    await f.engine.fork(c, 'g', { name: 'g2' });
    const own = await f.engine.exec(c, 'g', { command: 'echo 4 > /root/only-g' });
    const ownLayer = (await layersOf(own.version)).at(-1)!;
    const sharedLayers = await layersOf(shared.version);
    c.hold.release(); // nothing of this caller's pins its versions any more
    const r = await f.engine.gc.run();
    assert.ok(r.versionsDropped >= 2, `old history past retention goes: ${JSON.stringify(r)}`);
    assert.equal(r.layersDeleted, 0, 'the heads still stand on every layer');
    const c2 = await f.caller();
    await f.engine.deleteContext(c2, 'g');
    c2.hold.release();
    const after = await f.engine.gc.run();
    assert.equal(after.layersDeleted, 1, JSON.stringify(after));
    assert.equal(f.snapshotter.has(ownLayer), false, 'the deleted context\'s own layer is gone from the snapshotter');
    for (const l of sharedLayers) assert.ok(f.snapshotter.has(l), `the fork keeps ${l}`);
    const c3 = await f.caller();
    const b = await f.engine.files.read(c3, 'g2', '/root/b');
    assert.ok(b.kind === 'file' && b.readAll().toString() === '3\n', 'the fork reads what it shares with the deleted context');
  } finally {
    await f.close();
  }
});

test('fast tier: a version pinned by running work survives a collection', async () => {
  const f = await fakeEngine({ gc: { intervalMs: 3_600_000, retentionDays: 0, keepVersions: 1 } });
  try {
    const c = await f.caller();
    const old = (await f.engine.exec(c, 'p', { command: 'echo old > /root/x' })).version;
    await f.engine.exec(c, 'p', { command: 'echo new > /root/x' });
    await f.engine.exec(c, 'p', { command: 'echo newer > /root/x' });
    const reader = await f.caller();
    await f.engine.files.read(reader, 'p', '/root/x', old); // pins `old` until reader's hold is released
    c.hold.release();
    await f.engine.gc.run();
    const again = await f.engine.files.read(reader, 'p', '/root/x', old);
    assert.ok(again.kind === 'file' && again.readAll().toString() === 'old\n');
    reader.hold.release();
    await f.engine.gc.run();
    const c2 = await f.caller();
    await assert.rejects(f.engine.files.read(c2, 'p', '/root/x', old), /does not exist/);
  } finally {
    await f.close();
  }
});

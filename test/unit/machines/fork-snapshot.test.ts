import assert from 'node:assert/strict';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ShellbaseError } from '../../../packages/server/src/errors.ts';
import { MachineLayout } from '../../../packages/server/src/machines/layout.ts';
import { fastMachines, type FastMachines } from './fast-machines.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const code = (c: string, re?: RegExp) => (e: unknown) => (e as ShellbaseError).code === c && (!re || re.test((e as Error).message));

/** Forks, snapshots and restores over the in-memory VM backend, with the real SQLite store. */
describe('machines over in-memory VMs: fork, snapshot, restore', () => {
  let t: FastMachines;
  before(async () => { t = await fastMachines(); });
  after(async () => { await t.close(); });
  const exec = async (id: string, command: string) => (await t.machines.exec(await t.caller(), id, { command })).stdout;

  test('fork: copies with the memory, processes and disk of one instant; they diverge after; the source runs on', async () => {
    const c = await t.caller();
    const src = await t.machines.create(c, {});
    await exec(src.id, 'echo before > /root/shared; echo mem > /run/mem; ticker /run/ticks 50');
    await sleep(200);
    const forks = await t.machines.fork(c, src.id, 2);
    assert.equal(forks.length, 2);
    for (const f of forks) {
      assert.deepEqual([f.state, f.memoryMb], ['running', src.memoryMb]);
      assert.equal(await exec(f.id, 'cat /root/shared; cat /run/mem'), 'before\nmem\n');
      assert.ok(Number(await exec(f.id, 'cat /run/ticks')) > 0, 'the fork\'s process came along');
    }
    await exec(src.id, 'echo source > /root/shared');
    await exec(forks[0]!.id, 'echo fork0 > /root/shared');
    assert.deepEqual([await exec(src.id, 'cat /root/shared'), await exec(forks[0]!.id, 'cat /root/shared'), await exec(forks[1]!.id, 'cat /root/shared')], ['source\n', 'fork0\n', 'before\n']);
    const [srcRow, forkRow] = [await t.machines.rowOf(c, src.id), await t.machines.rowOf(c, forks[0]!.id)];
    assert.equal(forkRow.spec.disk[1], srcRow.spec.disk[1], 'the fork stands on the frozen layer the source left');
    for (const m of [src, ...forks]) await t.machines.remove(c, m.id);
    assert.equal(existsSync(srcRow.spec.disk[1]!), false, 'the frozen layer goes with the last machine on it');
  });

  test('fork(3) starts its copies at once, the last taking the memory file once the others copied it; one that fails takes the others with it', async () => {
    const c = await t.caller();
    const src = await t.machines.create(c, {});
    await exec(src.id, 'echo mem > /run/mem');
    const restore = t.backend.restore.bind(t.backend);
    const began: string[] = [];
    let failNext = false;
    // A copy goes on once all three began (or a while passed): the take must wait for it to copy.
    t.backend.restore = async (spec, from, goOn) => {
      began.push(from.takeRam ? 'take' : 'copy');
      if (!from.takeRam) for (let i = 0; i < 100 && began.length < 3; i++) await sleep(20);
      if (failNext && !from.takeRam) { failNext = false; from.ramCopied?.(); throw new Error('injected'); }
      return restore(spec, from, goOn);
    };
    try {
      const forking = t.machines.fork(c, src.id, 3);
      for (let i = 0; i < 100 && began.length < 3; i++) await sleep(20);
      const together = began.length;
      const forks = await forking;
      assert.equal(together, 3, 'the three restores began before any went on');
      assert.deepEqual(began.sort(), ['copy', 'copy', 'take']);
      for (const f of forks) assert.equal(await exec(f.id, 'cat /run/mem'), 'mem\n');
      for (const f of forks) await t.machines.remove(c, f.id);

      failNext = true;
      const layout = new MachineLayout(t.fake.engine.deps.config.home, t.fake.engine.deps.config.cache);
      await assert.rejects(t.machines.fork(c, src.id, 3));
      assert.deepEqual((await t.machines.list(c)).map((m) => m.id), [src.id], 'no copy of the failed fork is left');
      assert.deepEqual(readdirSync(layout.ramDir), [path.basename(layout.ramFile(src.id))], 'nor any memory file but the source\'s');
      assert.equal(await exec(src.id, 'cat /run/mem'), 'mem\n');
    } finally {
      t.backend.restore = restore;
      await t.machines.remove(c, src.id);
    }
  });

  test('fork of a hibernated machine wakes it first; a count past the limit is refused before anything pauses', async () => {
    const c = await t.caller();
    const src = await t.machines.create(c, {});
    await exec(src.id, 'echo mem > /run/mem');
    await t.machines.hibernate(c, src.id);
    await assert.rejects(t.machines.fork(c, src.id, 1000), code('invalid_argument'));
    const [f] = await t.machines.fork(c, src.id, 1);
    assert.equal(await exec(f!.id, 'cat /run/mem'), 'mem\n');
    assert.equal((await t.machines.get(c, src.id)).state, 'running');
    for (const id of [src.id, f!.id]) await t.machines.remove(c, id);
  });

  test('snapshot, then restore copies of it (each its own disk and port URLs); deleting it refuses later restores', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, {});
    await exec(m.id, 'echo snapped > /root/f; serve 8080 hi');
    await t.machines.expose(c, m.id, 8080);
    const snap = await t.machines.snapshot(c, m.id);
    assert.equal(snap.machine, m.id);
    await exec(m.id, 'echo later > /root/f');
    assert.deepEqual((await t.machines.listSnapshots(c)).map((s) => s.id), [snap.id]);
    const copies = await t.machines.restore(c, snap.id, 2);
    for (const r of copies) {
      assert.equal(r.snapshot, snap.id);
      assert.equal(await exec(r.id, 'cat /root/f'), 'snapped\n');
      assert.equal(r.ports[0]?.port, 8080);
      assert.notEqual(r.ports[0]?.url, (await t.machines.get(c, m.id)).ports[0]?.url, 'a copy\'s port has a URL of its own');
    }
    await t.machines.remove(c, m.id);
    assert.equal(await exec(copies[0]!.id, 'cat /root/f'), 'snapped\n', 'the snapshot outlives its machine');
    await t.machines.deleteSnapshot(c, snap.id);
    await assert.rejects(t.machines.restore(c, snap.id), code('not_found'));
    for (const r of copies) await t.machines.remove(c, r.id);
    await assert.rejects(t.machines.restore(c, 's_nosuch'), code('not_found'));
  });

  test('a snapshot restores only under the identity it was taken with, and whole', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, {});
    const snap = await t.machines.snapshot(c, m.id);
    const row = (await t.fake.metadata.machines.getSnapshot(c.tenantId, snap.id))!;
    await t.fake.metadata.machines.deleteSnapshot(c.tenantId, snap.id);
    await t.fake.metadata.machines.createSnapshot({ ...row, spec: { ...row.spec, qemu: 'another build' } });
    await assert.rejects(t.machines.restore(c, snap.id), code('failed_precondition', /another build/));
    await t.fake.metadata.machines.deleteSnapshot(c.tenantId, snap.id);
    await t.fake.metadata.machines.createSnapshot(row);
    rmSync(row.spec.ram);
    await assert.rejects(t.machines.restore(c, snap.id), code('failed_precondition', new RegExp(`incomplete \\(${path.basename(row.spec.ram)}`)));
    await t.machines.deleteSnapshot(c, snap.id);
    await t.machines.remove(c, m.id);
  });

  test('a tenant sees only its own machines and snapshots', async () => {
    const a = await t.caller('ta');
    const b = await t.caller('tb');
    const m = await t.machines.create(a, {});
    const snap = await t.machines.snapshot(a, m.id);
    assert.deepEqual((await t.machines.list(b)).map((x) => x.id), []);
    await assert.rejects(t.machines.get(b, m.id), code('not_found'));
    await assert.rejects(t.machines.exec(b, m.id, { command: 'true' }), code('not_found'));
    await assert.rejects(t.machines.restore(b, snap.id), code('not_found'));
    await t.machines.deleteSnapshot(a, snap.id);
    await t.machines.remove(a, m.id);
  });
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ShellbaseError } from '../../../packages/server/src/errors.ts';
import { fastMachines } from './fast-machines.ts';

const refused = (re: RegExp) => (e: unknown) => (e as ShellbaseError).code === 'limit_exceeded' && re.test((e as Error).message);

test('admission: a tenant\'s runningMachines counts machines holding memory; a hibernated one does not, and a wake is never refused by the quota', async () => {
  const t = await fastMachines();
  try {
    const c = await t.caller('tq', { runningMachines: 1 });
    const a = await t.machines.create(c, {});
    await assert.rejects(t.machines.create(c, {}), refused(/runningMachines/));
    await t.machines.pause(c, a.id);
    await assert.rejects(t.machines.create(c, {}), refused(/runningMachines/), 'a paused machine holds memory');
    await t.machines.hibernate(c, a.id);
    const b = await t.machines.create(c, {});
    await assert.rejects(t.machines.fork(c, b.id, 1), refused(/runningMachines/), 'a fork counts as a new machine');
    assert.equal((await t.machines.exec(c, a.id, { command: 'echo woken' })).stdout, 'woken\n');
    assert.deepEqual((await t.machines.list(c)).map((m) => m.state).sort(), ['running', 'running']);
    const other = await t.caller('tq2', { runningMachines: 1 });
    await t.machines.remove(other, (await t.machines.create(other, {})).id); // another tenant's quota is its own
    await t.machines.remove(c, a.id);
    await t.machines.remove(c, b.id);
  } finally {
    await t.close();
  }
});

test('admission: the host\'s cap on machines and its memory budget (waking included)', async () => {
  const t = await fastMachines({ machines: { maxRunning: 2, memoryBudgetMb: 1024 } });
  try {
    const c = await t.caller();
    const a = await t.machines.create(c, { memoryMb: 512 });
    await assert.rejects(t.machines.create(c, { memoryMb: 768 }), refused(/memory budget \(1024 MiB\) has 512 MiB left/));
    const b = await t.machines.create(c, { memoryMb: 256 });
    await assert.rejects(t.machines.create(c, { memoryMb: 128 }), refused(/at most 2 machines/));
    await assert.rejects(t.machines.restore(c, (await t.machines.snapshot(c, b.id)).id, 1), refused(/at most 2 machines/));
    await t.machines.hibernate(c, a.id);
    const d = await t.machines.create(c, { memoryMb: 512 });
    await assert.rejects(t.machines.exec(c, a.id, { command: 'true' }), refused(/at most 2 machines/), 'a wake needs the host\'s room');
    assert.equal((await t.machines.get(c, a.id)).state, 'hibernated', 'and stays hibernated without it');
    await t.machines.stop(c, d.id);
    assert.equal((await t.machines.exec(c, a.id, { command: 'echo up' })).stdout, 'up\n');
    for (const m of [a, b, d]) await t.machines.remove(c, m.id);
  } finally {
    await t.close();
  }
});

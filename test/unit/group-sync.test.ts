import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GroupSync } from '../../packages/server/src/util/group-sync.ts';

test('group sync: callers during a sync share the next one; each waits for a sync that started after it', async () => {
  const started: number[] = [];
  const release: (() => void)[] = [];
  const g = new GroupSync(() => new Promise<void>((r) => { started.push(Date.now()); release.push(r); }));
  const order: string[] = [];
  const a = g.run().then(() => order.push('a'));
  await Promise.resolve();
  const b = g.run().then(() => order.push('b'));
  const c = g.run().then(() => order.push('c'));
  assert.equal(started.length, 1, 'b and c wait for the running sync to end');
  release[0]();
  await a;
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(order, ['a'], 'b and c are not done by the sync that started before them');
  assert.equal(started.length, 2, 'one more sync for both');
  release[1]();
  await Promise.all([b, c]);
  assert.deepEqual(order, ['a', 'b', 'c']);
  const d = g.run();
  assert.equal(started.length, 3, 'idle: a new caller starts a sync at once');
  release[2]();
  await d;
});

test('group sync: a failed sync fails its callers, and the next one runs', async () => {
  let n = 0;
  const g = new GroupSync(async () => { n++; if (n === 1) throw new Error('disk'); });
  await assert.rejects(g.run(), /disk/);
  await g.run();
  assert.equal(n, 2);
});

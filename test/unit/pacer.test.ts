import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Pacer } from '../../packages/server/src/util/pacer.ts';

test('a pacer offers its initial size, then sizes pages to the target from what items cost', () => {
  const p = new Pacer({ targetMs: 10, min: 5, max: 1000, initial: 50 });
  assert.equal(p.size, 50);
  p.record(50, 100); // 2 ms an item
  assert.equal(p.size, 5);
  p.record(5, 0.5); // 0.1 ms an item: smoothed with the 2 ms before, 1.05 ms
  assert.equal(p.size, 9);
  for (let i = 0; i < 20; i++) p.record(1000, 1); // 0.001 ms an item
  assert.equal(p.size, 1000, 'held to max');
  for (let i = 0; i < 20; i++) p.record(10, 1000);
  assert.equal(p.size, 5, 'held to min');
  p.record(0, 50);
  p.record(10, Number.NaN);
  assert.equal(p.size, 5, 'empty pages and nonsense times teach nothing');
  assert.throws(() => new Pacer({ targetMs: 10, min: 0, max: 10, initial: 5 }), RangeError);
  assert.throws(() => new Pacer({ targetMs: 10, min: 5, max: 10, initial: 20 }), RangeError);
});

test('each() covers every item once, in order, in paced slices, and stops when told', async () => {
  const items = Array.from({ length: 100 }, (_, i) => i);
  const p = new Pacer({ targetMs: 4, min: 1, max: 100, initial: 10 });
  const seen: number[][] = [];
  const whole = await p.each(items, async (s) => {
    seen.push([...s]);
    const until = performance.now() + s.length * 0.5; // 0.5 ms an item: ~8 an ideal page
    while (performance.now() < until) { /* work */ }
  }, () => true);
  assert.equal(whole, true);
  assert.deepEqual(seen.flat(), items);
  assert.equal(seen[0].length, 10);
  assert.ok(seen.slice(1).every((s, i) => s.length <= 10 || i === seen.length - 2), `slices: ${seen.map((s) => s.length)}`);
  assert.ok(seen.length > 10, `the pages shrank toward ~8 items: ${seen.map((s) => s.length)}`);
  // A page that skipped its items (answering 0 worked on) teaches nothing: the next page keeps its size.
  const q = new Pacer({ targetMs: 4, min: 1, max: 100, initial: 10 });
  await q.each(items.slice(0, 30), async (s) => {
    if (s[0] === 0) { const until = performance.now() + 8; while (performance.now() < until) { /* 0.8 ms an item */ } return s.length; }
    return 0;
  }, () => true);
  assert.ok(q.size <= 6, `a skipped page left the size at ${q.size}`);
  // drain: paced steps until one does less than its limit, or until told to stop.
  let rows = 95;
  const limits: number[] = [];
  const drained = await new Pacer({ targetMs: 4, min: 10, max: 40, initial: 20 }).drain(async (limit) => {
    limits.push(limit);
    const n = Math.min(limit, rows);
    rows -= n;
    return n;
  }, () => true);
  assert.equal(drained, 95);
  assert.equal(rows, 0);
  assert.equal(limits[0], 20);
  assert.ok(limits.every((l) => l >= 10 && l <= 40), `limits ${limits}`);
  let steps = 0;
  const asked: number[] = [];
  const done = await new Pacer({ targetMs: 4, min: 10, max: 40, initial: 20 }).drain(async (limit) => { steps++; asked.push(limit); return limit; }, () => steps < 3);
  assert.equal(steps, 3, 'it stops when go() says so, though there is more');
  assert.equal(done, asked.reduce((a, b) => a + b, 0));
  let calls = 0;
  const stopped = await new Pacer({ targetMs: 4, min: 1, max: 10, initial: 10 }).each(items, async () => {}, () => ++calls < 3);
  assert.equal(stopped, false);
  assert.equal(calls, 3);
});

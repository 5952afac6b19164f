import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fakeEngine } from './fake-engine.ts';

test('fast tier: versions page newest first, `before` continuing where a page ended', async () => {
  const f = await fakeEngine();
  try {
    const c = await f.caller();
    for (let i = 0; i < 7; i++) await f.engine.exec(c, 'h', { command: `echo ${i} > /root/f` });
    const all = await f.engine.versions(c, 'h', 100);
    assert.equal(all.length, 8, 'seven writes over the image');
    const pages: string[] = [];
    let before: string | undefined;
    for (;;) {
      const page = await f.engine.versions(c, 'h', 3, before);
      if (page.length === 0) break;
      pages.push(...page.map((v) => v.id));
      before = page[page.length - 1].id;
    }
    assert.deepEqual(pages, all.map((v) => v.id));
    await assert.rejects(f.engine.versions(c, 'h', 3, 'v_nope'), /does not exist/);
  } finally {
    await f.close();
  }
});

test('fast tier: usage sums per UTC day and hour', async () => {
  const f = await fakeEngine();
  try {
    const c = await f.caller();
    await f.engine.exec(c, 'u', { command: 'true' });
    await f.engine.exec(c, 'u', { command: 'true' });
    const day = await f.engine.usage.summary(c, { groupBy: 'day' });
    assert.deepEqual(day.items.map((i) => [i.key, i.queries]), [[new Date().toISOString().slice(0, 10), 2]]);
    const hour = await f.engine.usage.summary(c, { groupBy: 'hour' });
    assert.match(hour.items[0].key, /^\d{4}-\d{2}-\d{2}T\d{2}$/);
    assert.equal(hour.total.queries, 2);
  } finally {
    await f.close();
  }
});

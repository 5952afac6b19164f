import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ShellbaseError } from '../../../packages/server/src/errors.ts';
import { fakeEngine } from './fake-engine.ts';

const quota = (name: string) => (e: unknown) => e instanceof ShellbaseError && e.code === 'limit_exceeded' && (e.details as { quota: string }).quota === name;

test('fast tier: quotas refuse with limit_exceeded and change nothing', async () => {
  const f = await fakeEngine();
  try {
    const c = await f.caller('q', { contexts: 2, concurrentQueries: 1, storedBytes: 10 });
    await f.engine.createContext(c, { name: 'one' });
    await f.engine.createContext(c, { name: 'two' });
    await assert.rejects(f.engine.createContext(c, { name: 'three' }), quota('contexts'));
    assert.deepEqual((await f.engine.listContexts(c)).map((x) => x.name), ['one', 'two']);

    const slow = f.engine.exec(c, 'one', { command: 'sleep 0.3' });
    await new Promise((r) => setTimeout(r, 50));
    await assert.rejects(f.engine.exec(c, 'two', { command: 'true' }), quota('concurrentQueries'));
    await slow;

    await f.engine.exec(c, 'one', { command: 'echo 0123456789abcdef > /root/big' });
    const head = (await f.engine.getContext(c, 'one')).head;
    await assert.rejects(f.engine.exec(c, 'one', { command: 'echo more > /root/more' }), quota('storedBytes'));
    await assert.rejects(f.engine.files.write(c, 'one', '/root/w', (await import('node:stream')).Readable.from(['x'])), quota('storedBytes'));
    assert.equal((await f.engine.getContext(c, 'one')).head, head, 'nothing committed');
  } finally {
    await f.close();
  }
});

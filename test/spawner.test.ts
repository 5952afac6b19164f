import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Spawner } from '../packages/server/src/util/spawner.ts';

test('spawner: a discarded stream stops reaching the server; the other stream and the exit still do', async () => {
  const spawner = new Spawner();
  try {
    let before = 0;
    let after = 0;
    let stderr = '';
    let discarded = false;
    const s = spawner.start(['sh', '-c', 'head -c 64M /dev/zero; echo done >&2'], undefined, {
      onStdout: (c) => {
        if (discarded) { after += c.length; return; }
        before += c.length;
        if (before >= 1 << 20) { discarded = true; s.discard(1); }
      },
      onStderr: (c) => { stderr += c.toString(); },
    });
    const exit = await s.exited;
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.equal(stderr, 'done\n', 'the writer ran to its end');
    // What was already in the pipe and in flight when the discard arrived; the rest of the 64 MiB never crossed.
    assert.ok(after < 4 << 20, `${after} bytes arrived after the discard`);
  } finally {
    spawner.close();
  }
});

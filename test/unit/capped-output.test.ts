import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CappedOutput } from '../../packages/server/src/runtime/bwrap/output.ts';

test('capped output: the producer is told once, with the first byte past the cap', () => {
  const chunk = Buffer.alloc(64 * 1024, 'y');
  // Chunks that end exactly on the cap (16 × 64 KiB = 1 MiB, as a pipe delivers them): a
  // flood past it must still be cut off at its source, not read and dropped here for ever.
  let full = 0;
  const exact = new CappedOutput(1 << 20, undefined, () => full++);
  for (let i = 0; i < 16; i++) exact.push(chunk);
  assert.equal(full, 0, 'nothing dropped yet');
  assert.equal(exact.truncated, false);
  exact.push(chunk);
  exact.push(chunk);
  assert.equal(full, 1);
  assert.equal(exact.truncated, true);
  assert.equal(exact.end().length, 1 << 20);

  // A chunk that crosses the cap keeps what fits.
  let crossed = 0;
  const across = new CappedOutput(10, undefined, () => crossed++);
  across.push(Buffer.from('12345678'));
  across.push(Buffer.from('abcdef'));
  assert.equal(across.end(), '12345678ab');
  assert.deepEqual([crossed, across.truncated], [1, true]);

  // Output that fits exactly is whole, not truncated.
  const fits = new CappedOutput(4, undefined, () => assert.fail('nothing was dropped'));
  fits.push(Buffer.from('abcd'));
  assert.deepEqual([fits.end(), fits.truncated], ['abcd', false]);
});

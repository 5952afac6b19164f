import assert from 'node:assert/strict';
import { test } from 'node:test';
import { withoutDeletedBelow } from '../../packages/server/src/machines/storage/commit.ts';

test('a machine\'s commit drops deletions at and below its mounts\' paths, and only those; names stay bytes', () => {
  const list = Buffer.concat(['/mnt/data', '/mnt/data/x', '/mnt/database', '/etc/gone', '/root/\xff-not-utf8'].map((p) => Buffer.concat([Buffer.from(p, 'latin1'), Buffer.alloc(1)])));
  const tar = Buffer.from('TAR');
  const out = withoutDeletedBelow(Buffer.concat([Buffer.from(`${list.length}\n`), list, tar]), ['/mnt/data']);
  const nl = out.indexOf(10);
  const n = Number(out.subarray(0, nl).toString());
  const kept = out.subarray(nl + 1, nl + 1 + n);
  assert.deepEqual(kept.toString('latin1').split('\0').filter(Boolean), ['/mnt/database', '/etc/gone', '/root/\xff-not-utf8']);
  assert.deepEqual(out.subarray(nl + 1 + n), tar, 'the tar follows unchanged');
});

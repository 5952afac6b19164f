import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { closeSync, ftruncateSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { copySparse } from '../packages/server/src/machines/storage/disk.ts';

// machines/storage/disk.ts `copySparse` (sbx-store copy, native/copy.c): a machine's RAM file as a
// stopped fork copies it.
const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-ram-copy-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const MiB = 1 << 20;
const allocated = (f: string) => statSync(f).blocks * 512;

test('a RAM file\'s copy has the same bytes, keeps its holes and leaves its zero pages out', async () => {
  const from = path.join(dir, 'ram');
  const fd = openSync(from, 'w');
  ftruncateSync(fd, 64 * MiB);
  writeSync(fd, randomBytes(3 * MiB), 0, 3 * MiB, 1 * MiB); // pages the guest wrote
  writeSync(fd, Buffer.alloc(8 * MiB), 0, 8 * MiB, 8 * MiB); // pages it wrote zeros to (as a live copy leaves every page)
  writeSync(fd, randomBytes(5000), 0, 5000, 20 * MiB + 100); // data not on page boundaries
  writeSync(fd, Buffer.from([1]), 0, 1, 64 * MiB - 1); // the last byte
  closeSync(fd);
  assert.ok(allocated(from) >= 11 * MiB, 'the zeros written take memory in the source');
  const to = path.join(dir, 'copy');
  await copySparse(from, to);
  assert.equal(statSync(to).size, 64 * MiB);
  assert.ok(readFileSync(to).equals(readFileSync(from)), 'the same bytes');
  // 3 MiB, the two pages of the 5,000 bytes and the last page (and a file system's own blocks):
  // holes and zero pages take nothing.
  assert.ok(allocated(to) <= 3 * MiB + 64 * 1024, `the copy allocates ${allocated(to)} bytes`);
});

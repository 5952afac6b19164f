import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, before, test } from 'node:test';
import { zstdCompressSync, zstdDecompressSync } from 'node:zlib';
import { packLayer, unpackLayer } from '../packages/server/src/store/blobs/pack.ts';
import { Dialer } from '../packages/server/src/util/dialer.ts';
import { Spawner } from '../packages/server/src/util/spawner.ts';

// store/blobs/pack.ts: a layer's pack (a header frame, then zstd frames of a tar stream) unpacked by zstd | tar.
let dir: string;
let spawner: Spawner;
let dialer: Dialer;
before(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'shellbase-pack-'));
  spawner = new Spawner();
  dialer = new Dialer(path.join(dir, 'streams'), spawner);
});
after(() => {
  spawner.close();
  rmSync(dir, { recursive: true, force: true });
});

const bytesOf = async (s: Readable): Promise<Buffer> => {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
};

const RECORD = 128 << 10; // tar's record when it unpacks (--blocking-factor=256)

/** Where an archive's content ends: after its last block holding anything but zeros, and the two zero blocks after it. */
function endOfArchive(archive: Buffer): number {
  let last = archive.length - 1;
  while (last >= 0 && archive[last] === 0) last--;
  return Math.ceil((last + 1) / 512) * 512 + 1024;
}

test('pack: the padding after tar\'s end of archive, written after tar has read that end, still unpacks (tar reads to the end)', async () => {
  // A tree whose tar ends inside tar's first 128 KiB record while tar's padding (to 10 KiB) runs
  // past that record: tar reads one whole record, finds the end of the archive in it, and zstd
  // has the rest of the padding still to write.
  let archive: Buffer | undefined;
  let header: Buffer | undefined;
  let tree = '';
  for (let size = 121_000; size < 131_072 && !archive; size += 1000) {
    tree = path.join(dir, `tree-${size}`);
    mkdirSync(tree);
    writeFileSync(path.join(tree, 'a'), 'x'.repeat(size));
    const pack = await bytesOf(packLayer(dialer, tree, { bytes: size }));
    const headerEnd = 8 + pack.readUInt32LE(4);
    const tar = zstdDecompressSync(pack.subarray(headerEnd));
    if (endOfArchive(tar) <= RECORD && tar.length > RECORD) [archive, header] = [tar, pack.subarray(0, headerEnd)];
  }
  assert.ok(archive && header, 'some size ends the archive inside the first record and pads it past it');
  // The archive in two frames, the second (padding only) sent after a pause.
  const first = Buffer.concat([header, zstdCompressSync(archive.subarray(0, RECORD))]);
  const second = zstdCompressSync(archive.subarray(RECORD));
  const source = Readable.from((async function* () {
    yield first;
    await new Promise((r) => setTimeout(r, 500));
    yield second;
  })());
  const into = path.join(dir, 'into');
  mkdirSync(into);
  await unpackLayer(dialer, source, into);
  assert.deepEqual(readFileSync(path.join(into, 'a')), readFileSync(path.join(tree, 'a')));
});

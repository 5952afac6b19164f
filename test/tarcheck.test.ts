import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { gzipSync, zstdCompressSync } from 'node:zlib';
import { tar } from '../packages/sdk/src/tar.ts';
import { SBX_TARCHECK } from '../packages/server/src/util/native.ts';

// native/tarcheck.c on its own (the images tests run it in its sandbox): what it passes to tar,
// drops, refuses and hashes, and how it says so.
const root = mkdtempSync(path.join(tmpdir(), 'shellbase-tarcheck-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

function check(input: Buffer, flags: string[] = []): { code: number | null; out: string; err: string; dir: string } {
  const dir = path.join(root, String(n++));
  mkdirSync(dir);
  const r = spawnSync(SBX_TARCHECK, [...flags, '--', 'tar', '-x', '-f', '-', '-C', dir], { input, timeout: 20_000 });
  return { code: r.status, out: r.stdout.toString(), err: r.stderr.toString(), dir };
}
const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

test('tarcheck: entries reach tar, devices and FIFOs are dropped and counted, the digest is of the whole stream', () => {
  const layer = tar([
    { path: 'a/file', data: 'one' }, { path: 'dev/zero-copy', type: 'char' }, { path: 'fifo', type: 'fifo' },
    { path: `long/${'n'.repeat(150)}`, data: 'pax' }, { path: 'link', type: 'symlink', linkname: '../../elsewhere' },
  ]);
  // What follows the end marker counts for the digest (as the OCI diff_id of the stream as sent).
  const stream = Buffer.concat([layer, Buffer.alloc(4096)]);
  for (const [flags, bytes] of [[[], stream], [['--gunzip'], gzipSync(stream)], [['--unzstd'], zstdCompressSync(stream)]] as const) {
    const r = check(bytes, [...flags]);
    assert.equal(r.code, 0, r.err + r.out);
    assert.match(r.out, new RegExp(`^diff-id ${sha(stream)}$`, 'm'));
    assert.match(r.out, /^dropped-count 2$/m);
    assert.deepEqual(r.out.split('\n').filter((l) => l.startsWith('dropped ')), ['dropped dev/zero-copy', 'dropped fifo']);
    assert.equal(readFileSync(path.join(r.dir, 'a/file'), 'utf8'), 'one');
    assert.equal(readFileSync(path.join(r.dir, 'long', 'n'.repeat(150)), 'utf8'), 'pax');
    assert.deepEqual(readdirSync(r.dir).sort(), ['a', 'link', 'long'], 'no device node and no FIFO was made');
  }
});

test('tarcheck: a member or hard link target with .. refuses the layer, in ustar, pax and GNU long names', () => {
  const src = path.join(root, 'gnu-src');
  mkdirSync(path.join(src, 'd'), { recursive: true });
  writeFileSync(path.join(src, 'd', 'x'), 'x');
  const gnuLong = `d/${'m'.repeat(120)}/../../../escape`;
  const gnu = spawnSync('tar', ['--format=gnu', '-c', '-f', '-', '-C', src, '--transform', `s|^d/x$|${gnuLong}|`, 'd/x']).stdout;
  const cases: [string, Buffer][] = [
    ['ustar', tar([{ path: 'ok', data: '1' }, { path: 'a/../../escape', data: 'x' }])],
    ['pax', tar([{ path: `${'p'.repeat(120)}/../../escape`, data: 'x' }])],
    ['hard link', tar([{ path: 'ok', data: '1' }, { path: 'h', type: 'hardlink', linkname: '../outside' }])],
    ['GNU long name', gnu],
  ];
  for (const [what, bytes] of cases) {
    const r = check(bytes);
    assert.equal(r.code, 65, `${what}: ${r.out}${r.err}`);
    assert.match(r.out, /^refused /m, what);
    assert.equal(readdirSync(r.dir).includes('escape'), false, what);
  }
});

test('tarcheck: not a tar, an empty stream and a damaged or cut compressed stream are told apart', () => {
  const garbage = check(randomBytes(2048));
  assert.equal(garbage.code, 65);
  assert.match(garbage.out, /^bad not a tar archive \(bad header checksum at byte 0\)$/m);
  const empty = check(Buffer.alloc(0));
  assert.equal(empty.code, 65);
  assert.match(empty.out, /^bad the tar archive is empty$/m);
  const big = gzipSync(tar([{ path: 'big', data: randomBytes(1 << 20) }]));
  const cut = check(big.subarray(0, big.length >> 1), ['--gunzip']);
  assert.equal(cut.code, 67, cut.out);
  assert.match(cut.err, /igzip/);
  const midEntry = check(tar([{ path: 'big', data: randomBytes(8192) }]).subarray(0, 4096));
  assert.equal(midEntry.code, 65);
  assert.match(midEntry.out, /^bad the tar archive ends in the middle of an entry$/m);
});

/** One header block as given (the size field's bytes as they are), its checksum made right. */
function rawHeader(name: string, type: string, size: Buffer | string, data = Buffer.alloc(0)): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0);
  h.write('0000644\0', 100);
  h.write('0000000\0', 108);
  h.write('0000000\0', 116);
  (Buffer.isBuffer(size) ? size : Buffer.from(size)).copy(h, 124);
  h.write('00000000000\0', 136);
  h.write(type, 156);
  h.write('ustar\0' + '00', 257);
  h.fill(' ', 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  const pad = Buffer.alloc((512 - (data.length % 512)) % 512);
  return Buffer.concat([h, data, pad]);
}

test('tarcheck: headers GNU tar could read another way are refused, not passed on', () => {
  const end = Buffer.alloc(1024);
  const pax = (records: string) => rawHeader('PaxHeader', 'x', `${Buffer.byteLength(records).toString(8).padStart(11, '0')}\0`, Buffer.from(records));
  const cases: [string, Buffer, RegExp][] = [
    ['a hard link with data', Buffer.concat([rawHeader('h', '1', '00000001000\0', Buffer.alloc(512)), end]), /link, directory or device with data/],
    ['a sparse file', Buffer.concat([rawHeader('s', 'S', '00000000000\0'), end]), /type layers here may not hold \(S\)/],
    ['a negative base-256 size', Buffer.concat([rawHeader('f', '0', Buffer.alloc(12, 0xff)), end]), /malformed size|size out of range/],
    ['a NUL before the digits', Buffer.concat([rawHeader('f', '0', '\x0000000001\0'), end]), /malformed size/],
    ['a pax record whose length wraps', Buffer.concat([pax('10 a=bcde\n18446744073709551606 path=x\n'), rawHeader('f', '0', '00000000000\0'), end]), /malformed pax header/],
    ['a pax size with a sign', Buffer.concat([pax('12 size=-10\n'), rawHeader('f', '0', '00000000000\0'), end]), /bad pax size/],
    ['GNU sparse keys', Buffer.concat([pax('27 GNU.sparse.name=../x123\n'), rawHeader('f', '0', '00000000000\0'), end]), /sparse/],
    ['a pax record with two blanks', Buffer.concat([pax('13  size=512\n'), rawHeader('f', '0', '00000000000\0'), end]), /malformed pax header/],
    ['a pax record without =', Buffer.concat([pax('9 size12\n'), rawHeader('f', '0', '00000000000\0'), end]), /malformed pax header/],
    ['a key twice in one header', Buffer.concat([pax('10 size=0\n12 size=512\n'), rawHeader('f', '0', '00000000000\0'), end]), /key twice/],
    ['a NUL in a pax key', Buffer.concat([pax('13 si\0ze=512\n'), rawHeader('f', '0', '00000000000\0'), end]), /malformed pax header/],
    ['a regular file named as a directory, with data', Buffer.concat([rawHeader('d/', '0', '00000001000\0', Buffer.alloc(512)), end]), /directory or device with data/],
  ];
  const longName = rawHeader('././@LongLink', 'L', '00000000001\0', Buffer.from('a/'));
  const hidden = check(Buffer.concat([longName, rawHeader('x', '0', '00000001000\0', Buffer.alloc(512)), end]));
  assert.equal(hidden.code, 65, `a long name read to its padding: ${hidden.out}`);
  assert.match(hidden.out, /directory or device with data/);
  // A second 'x' replaces the first, a second 'g' every global key (as GNU tar reads them): the
  // block after the file is a header then, and its `..` is seen, not passed on as data.
  const smuggled = rawHeader('../evil', '0', '00000000000\0');
  for (const [what, first, second] of [['x', pax('12 size=512\n'), pax('10 path=a\n')], ['g', rawHeader('G', 'g', '00000000014\0', Buffer.from('12 size=512\n')), rawHeader('G', 'g', '00000000014\0', Buffer.from('12 uid=1000\n'))]] as const) {
    const r = check(Buffer.concat([first, second, rawHeader('a', '0', '00000000000\0'), smuggled, end]));
    assert.equal(r.code, 65, `two '${what}' headers: ${r.out}${r.err}`);
    assert.match(r.out, /^refused \.\.\/evil$/m, what);
  }
  for (const [what, bytes, message] of cases) {
    const r = check(bytes);
    assert.equal(r.code, 65, `${what}: ${r.out}${r.err}`);
    assert.match(r.out, message, what);
  }
  // The same headers, well formed, pass.
  const ok = check(Buffer.concat([pax('12 size=512\n'), rawHeader('f', '0', '00000000000\0', Buffer.alloc(512, 1)), end]));
  assert.equal(ok.code, 0, ok.out + ok.err);
  assert.equal(readFileSync(path.join(ok.dir, 'f')).length, 512);
});

test('tarcheck --blob: the blob as sent is hashed and counted beside the diff_id, with progress; one byte past MAX refuses it', () => {
  const layer = tar([{ path: 'big', data: randomBytes(9 << 20) }, { path: 'dev/null', type: 'char' }]);
  for (const [flags, blob] of [[[], layer], [['--gunzip'], gzipSync(layer)], [['--unzstd'], zstdCompressSync(layer)]] as const) {
    const r = check(blob, [...flags, '--blob', String(blob.length)]);
    assert.equal(r.code, 0, r.err + r.out);
    assert.match(r.out, new RegExp(`^blob ${sha(blob)} ${blob.length}$`, 'm'));
    assert.match(r.out, new RegExp(`^diff-id ${sha(layer)}$`, 'm'));
    assert.match(r.out, /^dropped dev\/null$/m, 'reports and progress lines stay whole lines');
    const got = r.out.split('\n').filter((l) => l.startsWith('got ')).map((l) => Number(l.slice(4)));
    assert.equal(got.length, Math.floor(blob.length / (4 << 20)), `progress every 4 MiB: ${got.join(', ')}`);
    got.forEach((g, i) => assert.ok(g >= (i + 1) * (4 << 20) && g <= blob.length, `got ${g}`));
    const over = check(blob, [...flags, '--blob', String(blob.length - 1)]);
    assert.equal(over.code, 65, over.err + over.out);
    assert.match(over.out, new RegExp(`^bad the layer is larger than the ${blob.length - 1} bytes its manifest says$`, 'm'));
  }
  // A limit of 0 takes only an empty blob; a cut gzip stream says how much of it came.
  const empty = check(Buffer.alloc(1), ['--blob', '0']);
  assert.equal(empty.code, 65);
  assert.match(empty.out, /^bad the layer is larger than the 0 bytes its manifest says$/m);
  const gz = gzipSync(layer);
  const cut = check(gz.subarray(0, 1000), ['--gunzip', '--blob', String(gz.length)]);
  assert.equal(cut.code, 67, cut.err + cut.out);
  assert.match(cut.out, /^got 1000$/m);
  assert.equal(check(layer, ['--blob', 'x']).code, 2);
});

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { after, before, test } from 'node:test';
import { Dialer, feed } from '../packages/server/src/util/dialer.ts';
import { Spawner } from '../packages/server/src/util/spawner.ts';

// util/dialer.ts: programs started by the spawner whose stdin/stdout is a socket of this process.
let dir: string;
let spawner: Spawner;
let dialer: Dialer;
before(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'shellbase-dialer-'));
  spawner = new Spawner();
  dialer = new Dialer(path.join(dir, 'streams'), spawner);
});
after(() => {
  spawner.close();
  rmSync(dir, { recursive: true, force: true });
});

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

test('dialer: bytes go through a program both ways, with back-pressure, and its exit code comes back', async () => {
  assert.equal(statSync(path.join(dir, 'streams')).mode & 0o777, 0o700, 'nothing else can dial in');
  const data = randomBytes(8 << 20);
  const p = await dialer.start(['cat'], 'both');
  // Written while nothing reads yet: the socket fills, and the writes wait instead of piling up in memory.
  const writing = pipeline(Readable.from([data.subarray(0, 4 << 20), data.subarray(4 << 20)]), p.socket);
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(p.socket.writableLength < data.length, 'the writer waits for the reader');
  const chunks: Buffer[] = [];
  for await (const c of p.socket) chunks.push(c as Buffer);
  await writing;
  assert.equal(sha(Buffer.concat(chunks)), sha(data));
  assert.equal(await p.exited, 0);
  p.socket.destroy();
  const failing = await dialer.start(['sh', '-c', 'cat >/dev/null; echo broken >&2; exit 3'], 'in');
  failing.socket.end('x');
  assert.equal(await failing.exited, 3);
  assert.match(failing.stderr(), /broken/);
  failing.socket.destroy();
  assert.deepEqual(readdirSync(path.join(dir, 'streams')), [], 'each socket is gone once its program connected');
});

test('dialer: a program that cannot start says why; kill ends its whole process group', async () => {
  const missing = await dialer.start(['/nonexistent/program'], 'out');
  assert.equal(await missing.exited, 125);
  assert.match(missing.stderr(), /nonexistent/);
  missing.socket.destroy();
  const marker = path.join(dir, 'grandchild');
  // The grandchild would touch the marker after a second; killed with its group, it never does.
  const p = await dialer.start(['sh', '-c', `(sleep 1; touch ${marker}) & cat`], 'both');
  p.kill();
  assert.notEqual(await p.exited, 0);
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(existsSync(marker), false, 'the grandchild died with the group');
  p.socket.destroy();
});

test('feed: a body that fails (even with a code like a reset) kills the program and is thrown; a program that stops reading is its exit code', async () => {
  const marker = path.join(dir, 'finished');
  // The body fails after its first chunk, with the error a client's abort gives a request.
  const failing = new Readable({ read() { /* pushed below */ } });
  failing.push(Buffer.alloc(65536));
  setTimeout(() => failing.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' })), 100);
  await assert.rejects(feed(dialer, ['sh', '-c', `cat >/dev/null; touch ${marker}`], failing), /aborted/);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(existsSync(marker), false, 'the program was killed, not let finish on a cut stream');
  // A program that reads a little and ends: no error from the body's side, its exit code comes back.
  const big = Readable.from((function* () { for (let i = 0; i < 256; i++) yield Buffer.alloc(65536); })());
  const { code } = await feed(dialer, ['sh', '-c', 'head -c 10 >/dev/null; exit 3'], big);
  assert.equal(code, 3);
});

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { after, before, test } from 'node:test';
import { Dialer, feed, type DialedProcess, type Direction } from '../packages/server/src/util/dialer.ts';
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

/** A dialer that notes, in order, when a program is killed and when its connection is ended or closed. */
class Watched extends Dialer {
  readonly seen: string[] = [];
  override async start(argv: string[], direction: Direction): Promise<DialedProcess> {
    const p = await super.start(argv, direction);
    const { socket } = p;
    const end = socket.end.bind(socket);
    const destroy = socket.destroy.bind(socket);
    socket.end = ((...a: Parameters<typeof end>) => { this.seen.push('ended'); return end(...a); }) as typeof socket.end;
    socket.destroy = (e?: Error) => { this.seen.push('closed'); return destroy(e); };
    return { socket, exited: p.exited, stderr: p.stderr, stdout: p.stdout, kill: () => { this.seen.push('killed'); p.kill(); } };
  }
}

test('feed: when the body fails (with an error, or closed before its end) the program is killed before its connection closes: it never reads an end of file', async () => {
  const watched = new Watched(path.join(dir, 'watched'), spawner);
  for (const why of [Object.assign(new Error('aborted'), { code: 'ECONNRESET' }), undefined]) {
    watched.seen.length = 0;
    // It fails while it is fed (its first read is the pipeline's), not while the program starts.
    let fed = false;
    const failing = new Readable({
      read() {
        if (fed) return;
        fed = true;
        this.push(Buffer.alloc(65536));
        setTimeout(() => this.destroy(why), 50);
      },
    });
    await assert.rejects(feed(watched, ['cat'], failing), why ? /aborted/ : { code: 'ERR_STREAM_PREMATURE_CLOSE' });
    assert.equal(watched.seen[0], 'killed', `the kill comes first (${watched.seen.join(', ')})`);
    assert.ok(!watched.seen.includes('ended'), 'no end of file is sent');
  }
});

test('feed: a program that ends with writes still queued to it is its exit code, not a cancelled write', async () => {
  // The program's stdin stays open in a child that never reads it, so the body's writes wait in
  // this process when the program ends, and closing the connection cancels them.
  for (let i = 0; i < 3; i++) {
    const big = Readable.from((function* () { for (let i = 0; i < 256; i++) yield Buffer.alloc(65536); })());
    const { code } = await feed(dialer, ['sh', '-c', 'exec 3<&0; sleep 1 <&3 >/dev/null 2>&1 & sleep 0.2; exit 3'], big);
    assert.equal(code, 3);
  }
});

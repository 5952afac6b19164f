import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { acceptWebSocket, isWebSocketRequest, offeredProtocols } from '../../packages/server/src/util/websocket.ts';
import { readConsoleTail } from '../../packages/server/src/machines/vm/console-log.ts';

// The server side of RFC 6455 (util/websocket.ts) against Node's own WebSocket client, and raw
// frames a conforming client would never send.
describe('websocket', () => {
  let server: Server;
  let url: string;
  before(async () => {
    server = createServer((_req, res) => res.writeHead(404).end());
    server.on('upgrade', (req, socket, head) => {
      upgraded.add(socket);
      if (!isWebSocketRequest(req) || !offeredProtocols(req).includes('echo')) { socket.end('HTTP/1.1 400 Bad Request\r\n\r\n'); return; }
      const ws = acceptWebSocket(req, socket, head, 'echo', { maxMessageBytes: 64 * 1024, maxBufferedBytes: 1 << 20 });
      ws.onMessage = (data, binary) => {
        if (!binary && data.toString() === 'bye') ws.close(1000, 'asked to');
        else ws.send(binary ? data : `echo:${data.toString()}`);
      };
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const a = server.address() as { port: number };
    url = `ws://127.0.0.1:${a.port}/`;
  });
  // Upgraded connections are no longer the HTTP server's: without this, one a test left open
  // would keep the file's process alive until the kernel gave up on it.
  const upgraded = new Set<Duplex>();
  after(() => {
    for (const socket of upgraded) socket.destroy();
    server.close();
  });

  const open = async () => {
    const ws = new WebSocket(url, ['other', 'echo']);
    ws.binaryType = 'arraybuffer';
    await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
    return ws;
  };
  const next = (ws: WebSocket) => new Promise<string | Buffer>((resolve) => {
    ws.onmessage = (e) => resolve(typeof e.data === 'string' ? e.data : Buffer.from(e.data as ArrayBuffer));
  });

  test('the handshake picks the protocol; text and binary messages (short, 16-bit and 64-bit lengths) go both ways', async () => {
    const ws = await open();
    assert.equal(ws.protocol, 'echo');
    let got = next(ws); ws.send('héllo'); assert.equal(await got, 'echo:héllo');
    for (const n of [5, 300, 70_000 - 1]) {
      const b = Buffer.alloc(Math.min(n, 64 * 1024), 7);
      got = next(ws); ws.send(b); assert.deepEqual(await got, b);
    }
    const closed = new Promise<CloseEvent>((r) => { ws.onclose = r; });
    ws.send('bye');
    const e = await closed;
    assert.deepEqual([e.code, e.reason, e.wasClean], [1000, 'asked to', true]);
  });

  test('a message past the limit closes with 1009; the server stays up', async () => {
    const ws = await open();
    const closed = new Promise<CloseEvent>((r) => { ws.onclose = r; });
    ws.send(Buffer.alloc(64 * 1024 + 1));
    assert.equal((await closed).code, 1009);
    const again = await open();
    const got = next(again); again.send('still here'); assert.equal(await got, 'echo:still here');
    again.close();
  });

  /** A raw connection that completed the handshake. */
  async function raw(): Promise<{ send(b: Buffer): void; read(): Promise<Buffer> }> {
    const s = connect(Number(new URL(url).port), '127.0.0.1');
    let buf = Buffer.alloc(0);
    let wake: (() => void) | null = null;
    s.on('data', (c: Buffer) => { buf = Buffer.concat([buf, c]); wake?.(); });
    s.write('GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: echo\r\n\r\n');
    const read = async () => {
      for (let i = 0; i < 50 && buf.length === 0; i++) await new Promise<void>((r) => { wake = r; setTimeout(r, 100); });
      const out = buf; buf = Buffer.alloc(0); return out;
    };
    const hello = (await read()).toString();
    assert.match(hello, /^HTTP\/1\.1 101 /);
    assert.match(hello, /Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=/, 'the RFC 6455 example key gives the RFC\'s accept value');
    return { send: (b) => s.write(b), read };
  }
  const masked = (first: number, payload: Buffer) => {
    const mask = Buffer.from([1, 2, 3, 4]);
    const body = Buffer.from(payload.map((x, i) => x ^ mask[i & 3]));
    return Buffer.concat([Buffer.from([first, 0x80 | payload.length]), mask, body]);
  };

  test('fragments join into one message; a ping is answered between them; unmasked frames and bad UTF-8 close the connection', async () => {
    const c = await raw();
    c.send(Buffer.concat([masked(0x01, Buffer.from('ab')), masked(0x89, Buffer.from('p')), masked(0x80, Buffer.from('cd'))]));
    const got = await c.read();
    assert.deepEqual([...got.subarray(0, 3)], [0x8a, 1, 'p'.charCodeAt(0)], 'a pong with the ping\'s payload');
    const rest = got.length > 3 ? got.subarray(3) : await c.read();
    assert.equal(rest.subarray(2).toString(), 'echo:abcd');
    const u = await raw();
    u.send(Buffer.from([0x81, 1, 0x41]));
    const close = await u.read();
    assert.deepEqual([close[0], close.readUInt16BE(2)], [0x88, 1002]);
    const bad = await raw();
    bad.send(masked(0x81, Buffer.from([0xc3, 0x28])));
    const closed = await bad.read();
    assert.deepEqual([closed[0], closed.readUInt16BE(2)], [0x88, 1007]);
  });

  test('a close frame is answered with its code; one with a code no endpoint may send, a one-byte code or a reason not in UTF-8 fails with 1002 or 1007', async () => {
    const code = (n: number, reason: Buffer = Buffer.alloc(0)) => { const b = Buffer.alloc(2); b.writeUInt16BE(n); return Buffer.concat([b, reason]); };
    for (const [payload, answer] of [[code(1000), 1000], [code(4001, Buffer.from('done')), 4001], [code(1005), 1002], [code(1006), 1002], [code(999), 1002],
      [code(2000), 1002], [code(5000), 1002], [Buffer.from([3]), 1002], [code(1000, Buffer.from([0xc3, 0x28])), 1007]] as const) {
      const c = await raw();
      c.send(masked(0x88, payload));
      const got = await c.read();
      assert.deepEqual([got[0], got.readUInt16BE(2)], [0x88, answer], `close ${payload.toString('hex')}`);
    }
    const empty = await raw();
    empty.send(masked(0x88, Buffer.alloc(0)));
    assert.deepEqual([...(await empty.read()).subarray(0, 2)], [0x88, 0], 'a close without a code is answered without one');
  });
});

test('console tail: the last lines, a bounded read of a large log, none for a missing one, typed errors for bad counts', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'console-tail-'));
  try {
    const file = path.join(dir, 'console.log');
    assert.deepEqual(readConsoleTail(file, 10), { lines: [], truncated: false, size: 0 });
    writeFileSync(file, 'one\r\ntwo\r\nthree\n');
    assert.deepEqual(readConsoleTail(file, 2), { lines: ['two', 'three'], truncated: true, size: 16 });
    assert.deepEqual(readConsoleTail(file, 5).lines, ['one', 'two', 'three']);
    const line = `${'x'.repeat(99)}\n`;
    writeFileSync(file, line.repeat(20_000) + 'last');
    const t = readConsoleTail(file, 10_000);
    assert.equal(t.lines.length, 10_000);
    assert.equal(t.lines.at(-1), 'last');
    assert.ok(t.lines.every((l, i) => i === t.lines.length - 1 || l.length === 99), 'no piece of a cut line');
    assert.equal(t.truncated, true);
    for (const n of [0, -1, 10_001, 1.5]) assert.throws(() => readConsoleTail(file, n), (e: Error & { code?: string }) => e.code === 'invalid_argument');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

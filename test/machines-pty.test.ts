import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { request } from 'node:http';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { Shellbase, type MachineHandle, type MachinePty } from '@shellbase/sdk';
import { startTestServer, sleep, type TestServer } from './harness.ts';

// Hibernate on request, the console log's tail and the PTY (a WebSocket) of the public API, on
// one machine (TCG: every restore takes seconds). Another tenant sees none of it; bad input gets
// the API's typed errors.

const CLI = path.resolve('packages/cli/dist/main.js');
const run = promisify(execFile);

/** The CLI with `stdin` piped in (not a terminal); its exit code and stdout. */
function cli(args: string[], env: NodeJS.ProcessEnv, stdin = ''): Promise<{ code: number | null; stdout: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['pipe', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.on('data', (c: Buffer) => { stdout += c.toString(); });
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout }));
    child.stdin.end(stdin);
  });
}

/** Output of a PTY until `pattern` shows (or a timeout). */
function until(pty: MachinePty, pattern: RegExp, ms = 60_000): Promise<string> {
  let seen = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { stop(); reject(new Error(`no ${pattern} in ${ms} ms; the terminal showed:\n${seen}`)); }, ms);
    const stop = pty.onData((d) => {
      seen += d.toString();
      if (pattern.test(seen)) { clearTimeout(timer); stop(); resolve(seen); }
    });
  });
}

describe('machines: hibernate, console, pty', { timeout: 900_000 }, () => {
  let t: TestServer;
  let m: MachineHandle;
  let other: Shellbase;
  before(async () => {
    t = await startTestServer();
    m = await t.sb.machines.create({ memoryMb: 512 });
    const { apiKey } = await t.sb.tenants.create('pty-other');
    other = new Shellbase({ url: t.server.url, apiKey });
  });
  after(async () => { await m?.remove().catch(() => undefined); await t?.close(); });

  test('the OpenAPI document names the new routes', async () => {
    const doc = (await t.http('GET', '/v1/openapi.json')).json as { paths: Record<string, unknown> };
    for (const p of ['/v1/machines/{id}/hibernate', '/v1/machines/{id}/console', '/v1/machines/{id}/pty']) assert.ok(doc.paths[p], p);
  });

  test('the PTY: an interactive shell that sizes, echoes and exits with its code; the browser\'s way in (a subprotocol) works too', async () => {
    const pty = await m.pty({ cols: 91, rows: 27 });
    const typed = until(pty, /marker-2/);
    pty.write('stty size; tty; echo marker-$((1+1))\r');
    const out = await typed;
    assert.match(out, /27 91/);
    assert.match(out, /\/dev\/pts\/\d+/);
    pty.resize(120, 33);
    // The resize reaches the guest's terminal on its own way: ask again until it shows (a loaded TCG guest may take a while).
    const sized = until(pty, /33 120/);
    let shown = false;
    void sized.then(() => { shown = true; }, () => undefined);
    for (let i = 0; i < 60 && !shown; i++) { pty.write('stty size\r'); await sleep(500); }
    await sized;
    // A write larger than one message may be (1 MiB) goes in pieces: 1.5 MiB of lines, counted by cat.
    const reading = until(pty, /paste-ready-2/);
    pty.write("stty -echo; echo paste-ready-$((1+1)); cat > /root/paste; echo bytes=$(wc -c < /root/paste)\r");
    await reading;
    const counted = until(pty, /bytes=1572864/, 300_000);
    pty.write(`${'x'.repeat(1023)}\n`.repeat(1536));
    pty.write('\x04');
    await counted;
    pty.write('stty echo; exit 3\r');
    assert.deepEqual(await pty.exited, { exitCode: 3 });

    const key = Buffer.from(t.key).toString('base64url');
    const ws = new WebSocket(`${t.server.url.replace('http', 'ws')}/v1/machines/${m.id}/pty?cols=60&rows=10`, ['shellbase-pty', `shellbase-key.${key}`]);
    ws.binaryType = 'arraybuffer';
    let text = '';
    const seen = new Promise<void>((resolve) => {
      ws.onmessage = (e) => { if (typeof e.data !== 'string') text += Buffer.from(e.data as ArrayBuffer).toString(); if (/= ?42/.test(text)) resolve(); };
    });
    await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
    assert.equal(ws.protocol, 'shellbase-pty', 'the key is never echoed back');
    ws.send(new TextEncoder().encode('echo =$((6*7))\r'));
    await seen;
    ws.close();

    // A size out of range, sent once the terminal is open, is this terminal's error, not the server's end.
    for (const [cols, rows] of [[0, 24], [1.5, 24], [80, 5000]]) {
      const bad = await m.pty();
      bad.resize(cols, rows);
      await assert.rejects(bad.exited, (e: Error & { code?: string }) => e.code === 'invalid_argument', `resize ${cols}x${rows}`);
      bad.close();
    }
    assert.equal((await m.exec('echo alive')).stdout, 'alive\n', 'the server lived through them');
  });

  test('the PTY refuses bad requests with typed errors, and another tenant\'s key finds nothing', async () => {
    const url = `/v1/machines/${m.id}/pty`;
    const plain = await t.http('GET', url);
    assert.deepEqual([plain.status, plain.json.error.code], [400, 'invalid_argument']);
    await assert.rejects(m.pty({ cols: 0 }), (e: Error & { code?: string; status?: number }) => e.code === 'invalid_argument' && e.status === 400);
    await assert.rejects(m.pty({ rows: 1001 }), (e: Error & { code?: string }) => e.code === 'invalid_argument');
    await assert.rejects(other.machines.get(m.id).pty(), (e: Error & { code?: string; status?: number }) => e.code === 'not_found' && e.status === 404);
    await assert.rejects(t.sb.machines.get('m_nope').pty(), (e: Error & { code?: string }) => e.code === 'not_found');
    await assert.rejects(new Shellbase({ url: t.server.url, apiKey: 'sb_wrong' }).machines.get(m.id).pty(), (e: Error & { code?: string; status?: number }) => e.code === 'unauthorized' && e.status === 401);
    // Without the subprotocol, or with another parameter: refused before anything starts; an id
    // that is not even URL-encoded right is no machine's.
    for (const [where, protocol, expected] of [[`${url}`, 'other', 400], [`${url}?x=1`, 'shellbase-pty', 400], ['/v1/machines/m_%zz/pty', 'shellbase-pty', 404]] as const) {
      const status = await new Promise<number | undefined>((resolve, reject) => {
        const req = request(`${t.server.url}${where}`, { headers: {
          authorization: `Bearer ${t.key}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'sec-websocket-protocol': protocol,
        } });
        req.once('response', (res) => { res.resume(); resolve(res.statusCode); });
        req.once('upgrade', (_res, socket) => { socket.destroy(); resolve(101); });
        req.once('error', reject);
        req.end();
      });
      assert.equal(status, expected, `${where} ${protocol}`);
    }
    // A tenant's terminals open at once are bounded (each may hold 16 MiB for a slow reader).
    // (The terminals of the tests before may still be counted until their sockets close.)
    const many: MachinePty[] = [];
    for (let i = 0; many.length < 16; i++) {
      try { many.push(await m.pty()); } catch (e) { if ((e as { code?: string }).code !== 'limit_exceeded' || i > 100) throw e; await sleep(100); }
    }
    await assert.rejects(m.pty(), (e: Error & { code?: string; status?: number }) => e.code === 'limit_exceeded' && e.status === 429);
    for (const p of many) p.close();
    await Promise.all(many.map((p) => p.exited.catch(() => undefined)));
    for (let i = 0; ; i++) {
      const again = await m.pty().catch((e: Error & { code?: string }) => { if (e.code !== 'limit_exceeded' || i >= 50) throw e; return null; });
      if (again) { again.close(); break; }
      await sleep(100);
    }
  });

  test('console: the tail of its serial log, bounded and validated; another tenant\'s key finds nothing', async () => {
    await m.exec('echo console-marker > /dev/console');
    let tail = await m.console({ tail: 20 });
    for (let i = 0; !tail.lines.includes('console-marker'); i++) { assert.ok(i < 50, JSON.stringify(tail)); await sleep(100); tail = await m.console({ tail: 20 }); }
    assert.ok(tail.lines.length <= 20);
    assert.ok(tail.size > 0);
    assert.deepEqual((await m.console({ tail: 1 })).lines.length, 1);
    for (const q of ['tail=0', 'tail=10001', 'tail=abc', 'lines=3']) {
      const r = await t.http('GET', `/v1/machines/${m.id}/console?${q}`);
      assert.deepEqual([r.status, r.json.error.code], [400, 'invalid_argument'], q);
    }
    await assert.rejects(other.machines.get(m.id).console(), (e: Error & { code?: string }) => e.code === 'not_found');
    assert.equal((await t.http('GET', '/v1/machines/m_nope/console')).status, 404);
    // The CLI: the log's lines; a shell fed from a pipe runs its lines and exits with its code.
    const env = { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
    assert.match((await run(process.execPath, [CLI, 'machine', 'console', m.id, '--tail', '5'], { env })).stdout, /^console-marker$/m);
    const shell = await cli(['machine', 'shell', m.id], env, 'echo cli-$((2+3)); exit 4\n');
    assert.match(shell.stdout, /cli-5/);
    assert.equal(shell.code, 4);
    // Without an `exit`, the end of the piped input ends the shell (as Ctrl-D typed at a prompt).
    const eof = await cli(['machine', 'shell', m.id], env, 'echo eof-$((1+1))\n');
    assert.match(eof.stdout, /eof-2/);
    assert.equal(eof.code, 0);
  });

  test('hibernate: on request, from running or paused; idempotent; an open PTY ends with a typed error; the console reads without waking it; stopped is refused', async () => {
    await assert.rejects(other.machines.get(m.id).hibernate(), (e: Error & { code?: string }) => e.code === 'not_found');
    const pty = await m.pty();
    assert.equal((await m.hibernate()).state, 'hibernated');
    await assert.rejects(pty.exited, (e: Error & { code?: string }) => e.code === 'unavailable');
    assert.equal((await m.hibernate()).state, 'hibernated', 'hibernating a hibernated machine changes nothing');
    assert.ok((await m.console()).lines.includes('console-marker'));
    assert.equal((await m.info()).state, 'hibernated', 'reading the console does not wake it');
    // A PTY wakes it.
    const again = await m.pty();
    const up = until(again, /awake-ok/);
    again.write('echo awake-$(echo ok)\r');
    await up;
    assert.equal((await m.info()).state, 'running');
    again.close();
    await again.exited.catch(() => undefined);
    assert.equal((await m.pause()).state, 'paused');
    await assert.rejects(m.pty(), (e: Error & { code?: string; status?: number }) => e.code === 'failed_precondition' && e.status === 412);
    const env = { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
    assert.equal((await run(process.execPath, [CLI, 'machine', 'hibernate', m.id], { env })).stdout, 'hibernated\n', 'a paused machine hibernates (here through the CLI)');
    assert.equal((await m.stop()).state, 'stopped');
    await assert.rejects(m.hibernate(), (e: Error & { code?: string; status?: number }) => e.code === 'failed_precondition' && e.status === 412);
    await assert.rejects(m.pty(), (e: Error & { code?: string }) => e.code === 'failed_precondition');
  });
});

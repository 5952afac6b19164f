import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Shellbase } from '@shellbase/sdk';
import { spawnServer } from './harness.ts';

// A streamed exec that prints nothing for a while still answers: the head goes out and an empty
// line follows every keep-alive interval (HTTP clients give up on silent responses; fetch after
// 300 s). The server runs in its own process with the interval cut to 200 ms.
describe('NDJSON answers keep a silent command\'s connection alive', () => {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-keepalive-'));
  let child: ChildProcess;
  let sb: Shellbase;
  let url = '';
  let key = '';

  before(async () => {
    ({ child, sb } = await spawnServer(home, { env: { SHELLBASE_NDJSON_KEEPALIVE_MS: '200' } }));
    url = sb.url;
    key = readFileSync(path.join(home, 'admin.key'), 'utf8').trim();
  });
  after(async () => {
    if (child && child.exitCode === null) { const done = new Promise((r) => child.once('exit', r)); child.kill('SIGTERM'); await done; }
    rmSync(home, { recursive: true, force: true });
  });

  const stream = (body: object) => fetch(`${url}/v1/contexts/quiet/exec`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, accept: 'application/x-ndjson', 'content-type': 'application/json' }, body: JSON.stringify(body),
  });

  test('the head comes before a silent command ends, then empty lines, then the events; the SDK sees only the events', async () => {
    const started = Date.now();
    const res = await stream({ command: 'sleep 1.5; echo done' });
    assert.equal(res.status, 200);
    assert.ok(Date.now() - started < 1400, 'the head did not wait for the command');
    const text = await res.text();
    const lines = text.split('\n');
    assert.ok(lines.filter((l) => l === '').length >= 3, `keep-alives: ${JSON.stringify(text)}`);
    const events = lines.filter(Boolean).map((l) => JSON.parse(l) as { type: string; data?: string });
    assert.deepEqual(events.map((e) => e.type), ['stdout', 'exit']);
    const seen = [];
    for await (const e of sb.context('quiet').execStream('sleep 0.6; echo again')) seen.push(e.type);
    assert.deepEqual(seen, ['stdout', 'exit']);
  });

  test('an error found before the command runs is still a plain JSON error with its status', async () => {
    const res = await stream({ command: 'true', timeoutMs: -1 });
    assert.equal(res.status, 400);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'invalid_argument');
  });
});

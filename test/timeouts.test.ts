import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { InvalidArgumentError, Shellbase, limitMessage, type ExecEvent } from '@shellbase/sdk';
import { startTestServer, type TestServer } from './harness.ts';

const CLI = path.resolve('packages/cli/dist/main.js');
const run = promisify(execFile);
const HOUR = 3_600_000;
const DAY = 86_400_000;

describe('time limits: per tenant, up to 24 h, and named when met', () => {
  let t: TestServer;
  let key: string;
  before(async () => {
    t = await startTestServer();
    const made = await t.http('POST', '/v1/tenants', { body: { name: 'builder' } });
    assert.equal(made.status, 201, made.text);
    key = made.json.apiKey;
  });
  after(async () => { await t?.close(); });

  const exec = (body: Record<string, unknown>, headers?: Record<string, string>) => t.http('POST', '/v1/contexts/long/exec', { body, key, headers });
  const cli = async (...args: string[]) => {
    try {
      const r = await run(process.execPath, [CLI, ...args], { env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: key } });
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (e) {
      const err = e as { code: number; stdout: string; stderr: string };
      return { code: err.code, stdout: err.stdout, stderr: err.stderr };
    }
  };

  test('a query may ask for more than 600 s up to its tenant\'s maximum (1 h); the admin raises it to 24 h, never beyond', async () => {
    const ok = await exec({ command: 'echo ok', timeoutMs: 1_200_000 });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.stdout, 'ok\n');
    const over = await exec({ command: 'true', timeoutMs: 2 * HOUR });
    assert.equal(over.status, 400);
    assert.equal(over.json.error.code, 'invalid_argument');
    assert.deepEqual(over.json.error.details, { field: 'timeoutMs', value: 2 * HOUR, min: 1, max: HOUR });
    assert.match(over.json.error.message, /timeoutMs = 7200000 \(2h\) is above this tenant's maximum of 3600000 ms \(1h\)/);
    assert.match(over.json.error.hint, /quotas\.timeoutMs up to 86400000/);
    // Beyond what any tenant may have, the schema refuses it, naming the same field and its ceiling.
    const beyond = await exec({ command: 'true', timeoutMs: DAY + 1 });
    assert.equal(beyond.status, 400);
    assert.deepEqual([beyond.json.error.details.field, beyond.json.error.details.max], ['body.timeoutMs', DAY]);

    const raised = await t.http('PUT', '/v1/tenants/builder', { body: { quotas: { timeoutMs: DAY } } });
    assert.equal(raised.status, 200, raised.text);
    assert.deepEqual(raised.json.quotas, { timeoutMs: DAY });
    assert.equal((await exec({ command: 'true', timeoutMs: 2 * HOUR })).status, 200);
    assert.equal((await exec({ command: 'true', timeoutMs: DAY })).status, 200);
    const tooFar = await t.http('PUT', '/v1/tenants/builder', { body: { quotas: { timeoutMs: DAY + 1 } } });
    assert.equal(tooFar.status, 400);
    assert.deepEqual(tooFar.json.error.details, { field: 'quotas.timeoutMs', value: DAY + 1, max: DAY });
    const builder = (await t.http('GET', '/v1/tenants')).json.tenants.find((x: { name: string }) => x.name === 'builder');
    assert.deepEqual(builder.quotas, { timeoutMs: DAY }, 'the refused change changed nothing');
    // A service's start timeout follows the tenant's maximum too.
    const svc = await t.http('POST', '/v1/contexts/long/services', { key, body: { name: 'web', command: 'sleep 1', port: 8000, startTimeoutMs: 2 * HOUR } });
    assert.equal(svc.status, 201, svc.text);
    assert.equal((await t.http('PUT', '/v1/tenants/builder', { body: { quotas: {} } })).status, 200);
    const slowStart = await t.http('POST', '/v1/contexts/long/services', { key, body: { name: 'web2', command: 'sleep 1', port: 8001, startTimeoutMs: 2 * HOUR } });
    assert.equal(slowStart.status, 400);
    assert.deepEqual([slowStart.json.error.details.field, slowStart.json.error.details.max], ['startTimeoutMs', HOUR]);
  });

  test('a query that timed out names the limit, its value and the maximum: the result, the stream, the SDK and the CLI', async () => {
    const r = await exec({ command: 'sleep 5', timeoutMs: 500 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.timedOut, true);
    assert.deepEqual(r.json.limit, { name: 'timeoutMs', value: 500, max: HOUR });
    assert.equal((await exec({ command: 'true' })).json.limit, undefined, 'only a query that met a limit names one');

    const sb = new Shellbase({ url: t.server.url, apiKey: key });
    const events: ExecEvent[] = [];
    for await (const e of sb.context('long').execStream('sleep 5', { timeoutMs: 500 })) events.push(e);
    const exit = events.at(-1);
    assert.ok(exit?.type === 'exit' && exit.timedOut);
    assert.deepEqual(exit.limit, { name: 'timeoutMs', value: 500, max: HOUR });
    assert.equal(limitMessage(exit.limit),
      'the command timed out after 500ms (timeoutMs = 500); pass timeoutMs up to 1h (3600000 ms, this tenant\'s maximum) to give it longer');
    await assert.rejects(sb.context('long').exec('true', { timeoutMs: 2 * HOUR }), (e: unknown) =>
      e instanceof InvalidArgumentError && /above this tenant's maximum of 3600000 ms \(1h\)/.test(e.message) && e.details?.max === HOUR);

    const timedOut = await cli('exec', 'long', '--timeout', '500ms', '--', 'sleep 5');
    assert.equal(timedOut.code, 137);
    assert.equal(timedOut.stderr.trim(),
      'shellbase: the command timed out after 500ms (timeoutMs = 500); pass --timeout up to 1h (3600000 ms, this tenant\'s maximum) to give it longer');
    const long = await cli('exec', 'long', '--timeout', '20m', '--', 'echo fine');
    assert.deepEqual([long.code, long.stdout], [0, 'fine\n']);
    const tooLong = await cli('exec', 'long', '--timeout', '2h', '--', 'true');
    assert.equal(tooLong.code, 1);
    assert.match(tooLong.stderr, /^shellbase: invalid_argument: timeoutMs = 7200000 \(2h\) is above this tenant's maximum of 3600000 ms \(1h\)/);
    const bad = await cli('exec', 'long', '--timeout', 'soon', '--', 'true');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^shellbase: --timeout: "soon" is not a duration/);
    assert.match(bad.stderr, /usage: shellbase exec CTX \[--version V\] \[--timeout DURATION\]/);
  });
});

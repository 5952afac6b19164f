import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { request } from 'node:http';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { NotFoundError, Sandbox, SandboxNotFoundError, TimeoutError, type OutputMessage, type Result } from '@e2b/code-interpreter';
import { codeInterpreterServer, endCodeInterpreterServer } from './code-interpreter-fixture.ts';
import { sleep, type TestServer } from './harness.ts';

// The unmodified `@e2b/code-interpreter` SDK, and shellbase's own ways to run code (the SDK's
// runCode, the CLI's `machine code`, the MCP tool run_code), against a real server with machines of
// the code-interpreter image under TCG. One sandbox (made with sandbox-wide envs) serves every case
// whose state does not matter; a case that needs another makes it and ends it, so at most two VMs
// run at once. Everything made is removed in the end, failures included.
const CLI = path.resolve('packages/cli/dist/main.js');
const run = promisify(execFile);
const PNG = /^iVBORw0KGgo/; // base64 of the PNG signature

/** The status of `GET /health` sent to the API's port with this Host (fetch cannot set one). */
function statusByHost(url: string, host: string, headers: Record<string, string>): Promise<number> {
  const api = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: api.hostname, port: api.port, path: '/health', headers: { ...headers, host }, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('@e2b/code-interpreter and shellbase\'s runCode against a real server', { timeout: 900_000 }, () => {
  let t: TestServer;
  let sbx: Sandbox;
  const made: Sandbox[] = [];

  before(async () => {
    t = await codeInterpreterServer();
    // The first machine of a newly built image boots its template first (over a minute under TCG), past the SDK's 60 s default.
    sbx = await Sandbox.create('code-interpreter-v1', { timeoutMs: 900_000, requestTimeoutMs: 300_000, envs: { FOO: 'bar', SHARED: 'sandbox' } });
    made.push(sbx);
  });

  after(() => endCodeInterpreterServer(t, made));

  test('state persists between runCode calls; executionCount counts the cells', async () => {
    const first = await sbx.runCode('x = 41');
    assert.equal(first.results.length, 0);
    const second = await sbx.runCode('x + 1');
    assert.equal(second.text, '42');
    assert.equal(second.results[0].isMainResult, true);
    assert.equal(typeof first.executionCount, 'number');
    assert.equal(second.executionCount, first.executionCount! + 1);
  });

  test('streaming callbacks: stdout, stderr, results and the error, in order', async () => {
    const seen: string[] = [];
    const lines: OutputMessage[] = [];
    const x = await sbx.runCode([
      'import sys',
      'from IPython.display import display, Markdown',
      "print('out 1', flush=True)",
      "print('err 1', file=sys.stderr, flush=True)",
      "display(Markdown('**shown**'))",
      "'last'",
    ].join('\n'), {
      onStdout: (m) => { lines.push(m); seen.push(`stdout:${m.line}`); },
      onStderr: (m) => { lines.push(m); seen.push(`stderr:${m.line}`); },
      onResult: (r) => { seen.push(`result:${r.markdown ?? r.text}`); },
      onError: (e) => { seen.push(`error:${e.name}`); },
    });
    assert.deepEqual(seen, ['stdout:out 1\n', 'stderr:err 1\n', 'result:**shown**', 'result:last']);
    assert.deepEqual([lines[0].error, lines[1].error], [false, true]);
    assert.ok(lines.every((l) => Math.abs(new Date(l.timestamp / 1000).getTime() - Date.now()) < 120_000), JSON.stringify(lines));
    assert.deepEqual([x.logs.stdout, x.logs.stderr, x.text], [['out 1\n'], ['err 1\n'], 'last']);
    assert.equal(x.results[0].isMainResult, false, 'display() is not the main result');

    const failed: string[] = [];
    const y = await sbx.runCode("print('before')\nraise ValueError('bad value')", {
      onStdout: (m) => { failed.push(`stdout:${m.line}`); },
      onError: (e) => { failed.push(`error:${e.name}:${e.value}`); },
      onResult: () => { failed.push('result'); },
    });
    assert.deepEqual(failed, ['stdout:before\n', 'error:ValueError:bad value']);
    assert.equal(y.error?.name, 'ValueError');
  });

  test('result formats: text, html, markdown, json, a matplotlib PNG with its chart, a DataFrame\'s data; an error is returned, not thrown', async () => {
    const only = async (code: string): Promise<Result> => {
      const x = await sbx.runCode(code);
      assert.equal(x.error, undefined, JSON.stringify(x.error));
      assert.equal(x.results.length, 1, JSON.stringify(x.results));
      return x.results[0];
    };
    assert.equal((await only("'plain'")).text, 'plain');
    const html = await only("from IPython.display import HTML\nHTML('<b>bold</b>')");
    assert.deepEqual([html.html, html.isMainResult, html.formats()], ['<b>bold</b>', true, ['html']]);
    assert.equal((await only("from IPython.display import Markdown\nMarkdown('# Title')")).markdown, '# Title');
    const json = await only("from IPython.display import JSON\nJSON({'a': 1, 'b': [True, None]})");
    assert.deepEqual(json.json, { a: 1, b: [true, null] });

    const fig = await sbx.runCode([
      'import matplotlib.pyplot as plt',
      'plt.figure()',
      "plt.plot([1, 2, 3], [1, 4, 9], label='squares')",
      "plt.title('Growth'); plt.xlabel('n'); plt.ylabel('n squared')",
      'plt.show()',
    ].join('\n'));
    assert.equal(fig.error, undefined, JSON.stringify(fig.error));
    const png = fig.results.find((r) => r.png);
    assert.ok(png, JSON.stringify(fig.results.map((r) => r.formats())));
    assert.match(png.png!, PNG);
    const chart = png.chart as unknown as { type: string; title: string; x_label: string; y_label: string; elements: { label: string; points: [number, number][] }[] };
    assert.deepEqual([chart?.type, chart?.title, chart?.x_label, chart?.y_label], ['line', 'Growth', 'n', 'n squared']);
    assert.deepEqual(chart.elements.map((e) => [e.label, e.points]), [['squares', [[1, 1], [2, 4], [3, 9]]]]);

    const frame = await only("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})");
    assert.deepEqual(frame.data, { a: [1, 2], b: ['x', 'y'] });
    assert.match(frame.html ?? '', /<table/);

    const err = await sbx.runCode('1/0');
    assert.deepEqual([err.error?.name, err.error?.value, err.results.length], ['ZeroDivisionError', 'division by zero', 0]);
    // IPython's traceback, with its terminal colours (as E2B's own server sends it).
    const plain = err.error!.traceback.replace(/\x1b\[[0-9;]*m/g, '');
    assert.match(plain, /ZeroDivisionError\s+Traceback \(most recent call last\)/);
    assert.match(plain, /----> 1 1\/0/);
  });

  test('languages: javascript, typescript, bash, r', async () => {
    assert.equal((await sbx.runCode('1+2', { language: 'js' })).text, '3');
    const ts = await sbx.runCode('const n: number = 5\nn * 2', { language: 'ts' });
    assert.deepEqual([ts.text, ts.error], ['10', undefined]);
    const bash = await sbx.runCode('echo "from bash $((6*7))"', { language: 'bash' });
    assert.deepEqual([bash.logs.stdout.join(''), bash.error], ['from bash 42\n', undefined]);
    const r = await sbx.runCode('1+1', { language: 'r' });
    const shown = [r.text ?? '', ...r.results.map((x) => x.text ?? '')].join('\n');
    assert.match(shown, /\b2\b/, JSON.stringify(r));
    assert.equal(r.error, undefined);
    // A language the image has no kernel for is refused, not hung.
    await assert.rejects(sbx.runCode('1', { language: 'java' }), /400/);
    // No later case uses the R and TypeScript kernels: their memory goes back to the guest (a
    // sandbox's 512 MiB) before the next cases start kernels of their own.
    const idle = (await sbx.listCodeContexts()).filter((c) => c.language === 'r' || c.language === 'typescript');
    assert.equal(idle.length, 2, JSON.stringify(idle));
    for (const c of idle) await sbx.removeCodeContext(c);
  });

  test('env vars: the sandbox\'s (from create) in every language; a run\'s own, reverted after it', async () => {
    assert.equal((await sbx.runCode("import os\nos.environ.get('FOO')")).text, 'bar');
    assert.equal((await sbx.runCode('process.env.FOO', { language: 'js' })).text, 'bar');
    assert.equal((await sbx.runCode('echo "$FOO"', { language: 'bash' })).logs.stdout.join(''), 'bar\n');
    const during = await sbx.runCode("import os\nf\"{os.environ.get('SHARED')} {os.environ.get('ONLY_HERE')}\"", { envs: { SHARED: 'run', ONLY_HERE: 'x' } });
    assert.equal(during.text, 'run x');
    assert.equal((await sbx.runCode("import os\nf\"{os.environ.get('SHARED')} {os.environ.get('ONLY_HERE')}\"")).text, 'sandbox None');
    const js = await sbx.runCode('`${process.env.SHARED} ${process.env.ONLY_HERE}`', { language: 'js', envs: { ONLY_HERE: 'y' } });
    assert.equal(js.text, 'sandbox y');
    assert.equal((await sbx.runCode('String(process.env.ONLY_HERE)', { language: 'js' })).text, 'undefined');
  });

  test('cwd and contexts: create, list, restart (same id, fresh state), remove', async () => {
    assert.equal((await sbx.runCode('import os\nos.getcwd()')).text, '/home/user');
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' });
    assert.deepEqual([ctx.language, ctx.cwd], ['python', '/tmp']);
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, '/tmp');
    await sbx.runCode('kept = 7', { context: ctx });
    assert.equal((await sbx.runCode('kept', { context: ctx })).text, '7');
    assert.equal((await sbx.runCode("'kept' in dir()")).text, 'False', 'another context has its own state');
    const js = await sbx.createCodeContext({ language: 'js' });
    assert.equal(js.language, 'javascript');
    const listed = await sbx.listCodeContexts();
    assert.ok(listed.some((c) => c.id === ctx.id && c.cwd === '/tmp'), JSON.stringify(listed));
    assert.ok(listed.some((c) => c.id === js.id && c.language === 'javascript'));
    assert.ok(listed.some((c) => c.language === 'python' && c.cwd === '/home/user'), 'the default python context');

    await sbx.restartCodeContext(ctx);
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id), 'the same id after a restart');
    assert.equal((await sbx.runCode("'kept' in dir()", { context: ctx })).text, 'False');
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, '/tmp');

    await sbx.removeCodeContext(ctx);
    await sbx.removeCodeContext(js.id);
    const left = await sbx.listCodeContexts();
    assert.equal(left.some((c) => c.id === ctx.id || c.id === js.id), false, JSON.stringify(left));
    await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError);
    await assert.rejects(sbx.removeCodeContext(ctx), NotFoundError);
  });

  test('a run past its timeoutMs rejects with TimeoutError; the kernel is interrupted, its state kept', async () => {
    await sbx.runCode('x = 41');
    await assert.rejects(sbx.runCode('import time; time.sleep(60)', { timeoutMs: 2000 }), TimeoutError);
    // Killing the kernel instead (after 10 s) would lose `x`: the interrupt took.
    const next = await sbx.runCode('x + 1', { timeoutMs: 30_000 });
    assert.deepEqual([next.text, next.error], ['42', undefined]);
  });

  test('a sandbox killed mid-cell ends the stream with an error; without the traffic token its port is refused, another tenant cannot reach it', async () => {
    const s = await Sandbox.create('code-interpreter-v1', { timeoutMs: 600_000, network: { allowPublicTraffic: false } });
    made.push(s);
    assert.ok(s.trafficAccessToken, 'a sandbox with private traffic has a token');
    // Its own SDK handle sends the token.
    assert.equal((await s.runCode('2 * 21')).text, '42');
    // Anybody else: no token, a wrong one, another tenant's key, by header or Host.
    const other = (await t.http('POST', '/v1/tenants', { body: { name: 'ci-other', quotas: { runningMachines: 1 } } })).json as { apiKey: string };
    const byHost = (host: string, headers: Record<string, string>) => statusByHost(t.server.url, host, headers);
    const byHeader = (headers: Record<string, string>) => fetch(`${t.server.url}/health`, {
      headers: { 'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': '49999', ...headers },
    });
    assert.equal((await byHeader({})).status, 403);
    assert.equal((await byHeader({ 'E2B-Traffic-Access-Token': 'wrong' })).status, 403);
    assert.equal((await byHeader({ 'X-API-KEY': other.apiKey })).status, 403);
    assert.equal(await byHost(`49999-${s.sandboxId}.e2b.test`, { 'x-api-key': other.apiKey }), 403);
    assert.equal((await byHeader({ 'E2B-Traffic-Access-Token': s.trafficAccessToken! })).status, 200);
    await assert.rejects(Sandbox.connect(s.sandboxId, { apiKey: other.apiKey }), SandboxNotFoundError);
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: other.apiKey }), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(s.sandboxId, { apiKey: other.apiKey }), false);

    let started = false;
    const long = s.runCode("import time\nprint('started', flush=True)\ntime.sleep(120)", { timeoutMs: 300_000, onStdout: () => { started = true; } });
    const outcome = long.then(() => 'resolved', (e: unknown) => e);
    const end = Date.now() + 60_000;
    while (!started && Date.now() < end) await sleep(100);
    assert.ok(started, 'the cell started');
    assert.equal(await Sandbox.kill(s.sandboxId), true);
    const got = await outcome;
    assert.ok(got instanceof Error, `the run should fail, not ${String(got)}`);
    await assert.rejects(s.runCode('1'));
  });

  test('fork: the copy\'s kernel has the state of the moment, then each goes its own way', async () => {
    await sbx.runCode('x = 41');
    const [copy] = await t.sb.machines.get(sbx.sandboxId).fork(1);
    try {
      const there = await copy.runCode('x + 1');
      assert.deepEqual([there.results[0]?.text, there.error], ['42', undefined]);
      await copy.runCode('x = 1000');
      await sbx.runCode('x = 5');
      assert.equal((await copy.runCode('x')).results[0]?.text, '1000');
      assert.equal((await sbx.runCode('x')).text, '5');
    } finally {
      await copy.remove();
    }
  });

  test('native: the SDK\'s runCode, the CLI\'s machine code, the MCP tool run_code with a chart', async () => {
    const m = t.sb.machines.get(sbx.sandboxId);
    const x = await m.runCode('print(1); 2');
    assert.deepEqual([x.stdout, x.results.map((r) => [r.text, r.isMainResult]), x.error], [['1\n'], [['2', true]], undefined]);
    const failed = await m.runCode('1/0');
    assert.equal(failed.error?.name, 'ZeroDivisionError');

    const env = { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
    const cli = await run(process.execPath, [CLI, 'machine', 'code', sbx.sandboxId, '--', 'print(3)'], { env });
    assert.equal(cli.stdout, '3\n');
    const bad = await run(process.execPath, [CLI, 'machine', 'code', sbx.sandboxId, '--', 'raise KeyError("k")'], { env }).then(() => null, (e: unknown) => e as { code: number; stderr: string });
    assert.ok(bad, 'a code error fails the command');
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /KeyError/);

    const client = new Client({ name: 'test', version: '1' });
    await client.connect(new StdioClientTransport({
      command: process.execPath, args: [CLI, 'mcp'], stderr: 'ignore', env: env as Record<string, string>,
    }));
    try {
      const r = await client.callTool({ name: 'run_code', arguments: {
        machine: sbx.sandboxId, code: 'import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()\nprint("drawn")',
      } }) as { content: { type: string; text?: string; data?: string; mimeType?: string }[]; isError?: boolean };
      assert.notEqual(r.isError, true, JSON.stringify(r.content));
      assert.match(r.content[0].text ?? '', /drawn/);
      const image = r.content.find((c) => c.type === 'image');
      assert.equal(image?.mimeType, 'image/png');
      assert.match(image.data ?? '', PNG);
    } finally {
      await client.close();
    }
  });
});

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Ajv } from 'ajv';
import { closedPort, startTestServer, type TestServer } from './harness.ts';

const CLI = path.resolve('packages/cli/dist/main.js');
type Content = { content: { type: string; text: string }[]; isError?: boolean };
const textOf = (r: unknown) => (r as Content).content.map((c) => c.text).join('');

/** A multi-step agent task: write a Python file, run it, fork, change the fork, diff the two. */
async function task(client: Client, ctxArgs: (extra: Record<string, unknown>) => Record<string, unknown>, forkName: string): Promise<void> {
  const call = async (name: string, args: Record<string, unknown>) => {
    const r = await client.callTool({ name, arguments: ctxArgs(args) });
    assert.ok(!(r as Content).isError, `${name}: ${textOf(r)}`);
    return textOf(r);
  };
  assert.match(await call('write_file', { path: '/root/app.py', content: 'print(sum(range(10)))\n' }), /wrote 22 bytes to \/root\/app\.py; version v_/);
  const run = await call('exec', { command: 'python3 /root/app.py && echo made > /root/out.txt' });
  assert.match(run, /^exit code 0\n--- stdout ---\n45\n/);
  assert.match(run, /\(its changes were committed\)$/);
  const base = (await call('versions', { limit: 1 })).split(' ')[0];
  assert.match(await call('fork_context', { name: forkName }), new RegExp(`into ${forkName}$`));
  const change = await client.callTool({ name: 'write_file', arguments: { context: forkName, path: '/root/app.py', content: 'print("fork")\n' } });
  const forkVersion = /version (v_\S+)/.exec(textOf(change))?.[1];
  assert.ok(forkVersion, textOf(change));
  const diff = await call('diff', { from: base, to: forkVersion, path: '/root/app.py' });
  assert.match(diff, /^modified file +\/root\/app\.py/);
  assert.match(diff, /-print\(sum\(range\(10\)\)\)\n\+print\("fork"\)/);
  assert.equal(await call('read_file', { path: '/root/out.txt' }), 'made\n');
  assert.match(await call('list_dir', { path: '/root' }), /file +0644 +22 app\.py/);
}

describe('MCP: shellbase as tools for any agent', () => {
  let t: TestServer;
  const env = () => ({ ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key });
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  const stdio = async (...args: string[]) => {
    const client = new Client({ name: 'test', version: '1' });
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [CLI, 'mcp', ...args], env: env() as Record<string, string>, stderr: 'ignore' }));
    return client;
  };

  test('over stdio: tools listed, a multi-step task, errors as tool errors, long output saved', async () => {
    const client = await stdio();
    try {
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((x) => x.name).sort(),
        ['build_context', 'click', 'create_machine', 'delete_machine', 'diff', 'exec', 'fork_context', 'key', 'list_dir', 'machine_exec', 'machine_fork', 'read_file', 'reset', 'run_code', 'screenshot', 'start_service', 'type', 'versions', 'write_file']);
      for (const x of tools) assert.ok((x.description ?? '').length > 40, `${x.name} says what it does`);
      await task(client, (a) => ({ context: 'agent', ...a }), 'agent-try');
      const bad = await client.callTool({ name: 'read_file', arguments: { context: 'agent', path: '/root/nope' } });
      assert.equal((bad as Content).isError, true);
      assert.match(textOf(bad), /^not_found: /);
      const long = await client.callTool({ name: 'exec', arguments: { context: 'agent', command: 'seq 1 20000' } });
      const text = textOf(long);
      const saved = /all of it is in (\/root\/\.mcp-output\/\d+\.txt)/.exec(text)?.[1];
      assert.ok(saved && text.length < 20_000, text.slice(-300));
      const rest = textOf(await client.callTool({ name: 'read_file', arguments: { context: 'agent', path: saved, offset: 100_000 } }));
      assert.match(rest, /19999\n20000\n/);
    } finally {
      await client.close();
    }
  });

  test('--context pins a context: no context argument, every tool works on it', async () => {
    const client = await stdio('--context', 'pinned');
    try {
      const exec = (await client.listTools()).tools.find((x) => x.name === 'exec')!;
      assert.ok(!('context' in (exec.inputSchema.properties ?? {})));
      assert.deepEqual(exec.inputSchema.required, ['command']);
      await client.callTool({ name: 'exec', arguments: { command: 'echo pinned > /root/where' } });
      assert.equal((await t.sb.context('pinned').files.read('/root/where')).toString(), 'pinned\n');
    } finally {
      await client.close();
    }
  });

  test('every tool declares an outputSchema and answers with structuredContent that fits it', async () => {
    const client = await stdio('--context', 'structured');
    try {
      const { tools } = await client.listTools();
      const ajv = new Ajv({ strict: false });
      const validate = new Map(tools.map((x) => {
        assert.ok(x.outputSchema, `${x.name} has an outputSchema`);
        return [x.name, ajv.compile(x.outputSchema)];
      }));
      const structured = async (name: string, args: Record<string, unknown>) => {
        const r = await client.callTool({ name, arguments: args }) as Content & { structuredContent?: Record<string, unknown> };
        assert.ok(!r.isError, `${name}: ${textOf(r)}`);
        assert.ok(r.structuredContent, `${name} answers with structuredContent`);
        const check = validate.get(name)!;
        assert.ok(check(r.structuredContent), `${name}: ${JSON.stringify(check.errors)}`);
        return r.structuredContent as Record<string, any>;
      };
      const run = await structured('exec', { command: 'echo out; echo err >&2; echo x > /root/s; exit 3' });
      assert.equal(run.exitCode, 3);
      assert.equal(run.stdout, 'out\n');
      assert.equal(run.stderr, 'err\n');
      assert.equal(run.committed, true);
      assert.match(run.version, /^v_/);
      assert.equal(run.limit, undefined);
      // A command that met its time limit: the text and the fields name the limit, its value, the parameter and the maximum.
      const slow = await client.callTool({ name: 'exec', arguments: { command: 'sleep 5', timeoutMs: 500 } }) as Content & { structuredContent: Record<string, any> };
      assert.ok(validate.get('exec')!(slow.structuredContent), JSON.stringify(validate.get('exec')!.errors));
      assert.match(textOf(slow), /^exit code 137 \(the command timed out after 500ms \(timeoutMs = 500\); pass timeoutMs up to 1h \(3600000 ms, this tenant's maximum\)/);
      assert.equal(slow.structuredContent.timedOut, true);
      assert.deepEqual(slow.structuredContent.limit, { name: 'timeoutMs', value: 500, max: 3_600_000 });
      assert.match(slow.structuredContent.timeoutMessage, /timeoutMs = 500\b.*pass timeoutMs up to 1h/);
      const w = await structured('write_file', { path: '/root/a.txt', content: 'hello' });
      assert.deepEqual([w.path, w.bytes], ['/root/a.txt', 5]);
      assert.equal((await structured('read_file', { path: '/root/a.txt' })).content, 'hello');
      assert.ok((await structured('list_dir', { path: '/root' })).entries.some((e: { name: string }) => e.name === 'a.txt'));
      const versions = (await structured('versions', { limit: 3 })).versions;
      assert.equal(versions[0].id, w.version);
      assert.equal(versions[0].cause, 'write');
      const d = await structured('diff', { path: '/root/a.txt' });
      assert.deepEqual(d.changes, [{ path: '/root/a.txt', kind: 'added', type: 'file' }]);
      const f = await structured('fork_context', { name: 'structured-fork' });
      assert.equal(f.head, w.version);
      assert.equal((await structured('reset', { version: run.version })).context, 'structured');
      const dockerfile = 'FROM debian\nCOPY hello.txt /root/\nRUN cat /root/hello.txt && echo copied > /root/copy.txt\n';
      const b = await structured('build_context', { tag: 'mcp-built', dockerfile, files: { 'hello.txt': 'hi\n' } });
      assert.deepEqual(b.steps.map((x: { cached: boolean }) => x.cached), [true, false, false]);
      assert.equal(b.output, 'hi\n', 'RUN output is returned');
      const again = await structured('build_context', { tag: 'mcp-built', dockerfile, files: { 'hello.txt': 'hi\n' } });
      assert.deepEqual(again.steps.map((x: { cached: boolean }) => x.cached), [true, true, true]);
      const s = await structured('start_service', { name: 'web', command: 'python3 -m http.server 8000', port: 8000 });
      assert.match(s.url, /^http:/);
    } finally {
      await client.close();
    }
  });

  test('a server that cannot be reached: the tool error names the URL and SHELLBASE_URL', async () => {
    const client = new Client({ name: 'test', version: '1' });
    const url = `http://127.0.0.1:${await closedPort()}`;
    const closed = { ...process.env, SHELLBASE_URL: url, SHELLBASE_API_KEY: 'x' } as Record<string, string>;
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [CLI, 'mcp'], env: closed, stderr: 'ignore' }));
    try {
      const r = await client.callTool({ name: 'exec', arguments: { context: 'x', command: 'true' } });
      assert.equal((r as Content).isError, true);
      assert.ok(textOf(r).startsWith(`unavailable: cannot reach the shellbase server at ${url} (from SHELLBASE_URL): ECONNREFUSED`), textOf(r));
    } finally {
      await client.close();
    }
  });

  test('over Streamable HTTP without a pinned context', async () => {
    const child: ChildProcess = spawn(process.execPath, [CLI, 'mcp', '--http', '0'], { env: env(), stdio: ['ignore', 'ignore', 'pipe'] });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let err = '';
        child.stderr!.on('data', (c: Buffer) => { err += c; const m = /listening on (\S+)/.exec(err); if (m) resolve(m[1]); });
        child.on('exit', (code) => reject(new Error(`mcp exited ${code}: ${err}`)));
      });
      const client = new Client({ name: 'test', version: '1' });
      await client.connect(new StreamableHTTPClientTransport(new URL(url)));
      try {
        const exec = (await client.listTools()).tools.find((x) => x.name === 'exec')!;
        assert.ok((exec.inputSchema.required ?? []).includes('context'), 'without a pin, tools name their context');
        await task(client, (a) => ({ context: 'http-agent', ...a }), 'http-try');
      } finally {
        await client.close();
      }
    } finally {
      child.kill();
    }
  });
});

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { AlreadyExistsError, InvalidArgumentError, NotFoundError, Shellbase, ShellbaseError, UnauthorizedError } from '@shellbase/sdk';
import { startTestServer, type TestServer } from './harness.ts';

const CLI = path.resolve('packages/cli/dist/main.js');
const run = promisify(execFile);

describe('SDK errors and the CLI', () => {
  let t: TestServer;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    t = await startTestServer();
    env = { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
  });
  after(async () => { await t?.close(); });

  const cli = async (...args: string[]) => {
    try {
      const r = await run(process.execPath, [CLI, ...args], { env });
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (e) {
      const err = e as { code: number; stdout: string; stderr: string };
      return { code: err.code, stdout: err.stdout, stderr: err.stderr };
    }
  };

  test('SDK maps error codes to typed errors with hints', async () => {
    await assert.rejects(t.sb.contexts.get('missing'), (e: unknown) => e instanceof NotFoundError && e.status === 404 && e.code === 'not_found');
    await assert.rejects(t.sb.context('x').exec('true', { timeoutMs: -5 }), (e: unknown) =>
      e instanceof InvalidArgumentError && e instanceof ShellbaseError && typeof e.hint === 'string' && /timeoutMs/.test(e.hint));
    await t.sb.contexts.create({ name: 'dup' });
    await assert.rejects(t.sb.contexts.create({ name: 'dup' }), AlreadyExistsError);
    const stranger = new Shellbase({ url: t.server.url, apiKey: 'sb_not_a_key' });
    await assert.rejects(stranger.contexts.list(), UnauthorizedError);
  });

  test('an SDK exec allowed more than 240 s is read as a stream (no response head to wait 300 s for), with the same result', async () => {
    const ctx = t.sb.context('long-exec');
    const plain = await ctx.exec('echo out; echo err >&2; echo a > /root/a; exit 3');
    const long = await ctx.exec('echo out; echo err >&2; echo b > /root/b; exit 3', { timeoutMs: 300_000 });
    assert.deepEqual(Object.keys(long).sort(), Object.keys(plain).sort());
    assert.deepEqual([long.exitCode, long.stdout, long.stderr, long.committed, long.truncated], [3, 'out\n', 'err\n', plain.committed, false]);
    assert.notEqual(long.version, plain.version);
    assert.equal((await ctx.files.read('/root/b')).toString(), 'b\n', 'its writes committed as a plain exec\'s');
    await assert.rejects(ctx.exec('true', { timeoutMs: 10_000_000 }), InvalidArgumentError, 'refused before it runs, as a typed error');
  });

  test('exec streams output and exits with the command\'s code', async () => {
    const r = await cli('exec', 'cli-ctx', '--', 'echo out; echo err >&2; echo data > /root/d; exit 5');
    assert.equal(r.code, 5);
    assert.equal(r.stdout, 'out\n');
    assert.equal(r.stderr, 'err\n');
    const argv = await cli('exec', 'cli-ctx', '--', 'cat', '/root/d');
    assert.equal(argv.code, 0);
    assert.equal(argv.stdout, 'data\n');
  });

  test('contexts, log, fork and exec --version', async () => {
    const contexts = await cli('contexts');
    assert.match(contexts.stdout, /^cli-ctx\s+v_/m);
    const log = await cli('log', 'cli-ctx');
    const lines = log.stdout.trim().split('\n');
    assert.equal(lines.length, 2, log.stdout);
    assert.match(lines[0], /exec .*echo out/);
    assert.match(lines[1], /image/);
    const first = lines[1].split(/\s+/)[0];
    assert.equal((await cli('fork', 'cli-ctx', 'cli-fork')).code, 0);
    assert.equal((await cli('exec', 'cli-fork', '--', 'cat /root/d')).stdout, 'data\n');
    const past = await cli('exec', 'cli-ctx', '--version', first, '--', 'test -e /root/d || echo absent');
    assert.equal(past.stdout, 'absent\n');
    assert.match((await cli('gc')).stdout, /^dropped \d+ versions, deleted \d+ layers \(\d+ bytes\) in \d+ ms\n$/);
  });

  test('SDK files, diff, merge and reset', async () => {
    const ctx = t.sb.context('sdk-files');
    const w = await ctx.files.write('/notes/a b.txt', 'first\n', { mode: 0o600 });
    assert.equal((await ctx.files.read('/notes/a b.txt')).toString(), 'first\n');
    assert.deepEqual((await ctx.files.list('/notes')).map((e) => [e.name, e.type, e.mode]), [['a b.txt', 'file', 0o600]]);
    assert.equal((await ctx.files.stat('/notes/a b.txt')).size, 6);
    assert.equal((await ctx.files.read('/notes/../notes/./a b.txt')).toString(), 'first\n', 'dot segments resolve on the server');
    const part = await ctx.files.open('/notes/a b.txt', { range: [1, 3] });
    assert.equal(await part.text(), 'irs');
    const fork = await ctx.fork('sdk-files-fork');
    await fork.files.write('/notes/b.txt', 'second\n');
    assert.deepEqual((await ctx.diff({ from: w.version, to: (await fork.info()).head })).changes.map((c) => c.path), ['/notes/b.txt']);
    await ctx.merge('sdk-files-fork');
    assert.equal((await ctx.files.read('/notes/b.txt')).toString(), 'second\n');
    await ctx.files.remove('/notes', { recursive: true });
    await assert.rejects(ctx.files.stat('/notes'), NotFoundError);
    await ctx.reset(w.version);
    assert.equal((await ctx.at(w.version).files.read('/notes/a b.txt')).toString(), 'first\n');
    assert.equal((await ctx.files.read('/notes/a b.txt')).toString(), 'first\n');
  });

  test('CLI cp, cat, ls, diff, merge and reset', async () => {
    const local = path.join(tmpdir(), `shellbase-cli-${process.pid}.txt`);
    writeFileSync(local, 'from the host\n');
    assert.equal((await cli('cp', local, 'cli-files:/root/in.txt')).code, 0);
    assert.equal((await cli('cat', 'cli-files:/root/in.txt')).stdout, 'from the host\n');
    assert.match((await cli('ls', 'cli-files:/root')).stdout, /^-0644\s+14 \S+ in\.txt$/m);
    assert.equal((await cli('cp', 'cli-files:/root/in.txt', `${local}.back`)).code, 0);
    assert.equal(readFileSync(`${local}.back`, 'utf8'), 'from the host\n');
    const first = (await t.sb.context('cli-files').info()).head;
    await cli('fork', 'cli-files', 'cli-files-2');
    await cli('exec', 'cli-files-2', '--', 'echo more > /root/more.txt; rm /root/in.txt');
    assert.equal((await cli('merge', 'cli-files-2', 'cli-files')).code, 0);
    assert.equal((await cli('diff', 'cli-files')).stdout, '- /root/in.txt\n+ /root/more.txt\n');
    assert.equal((await cli('reset', 'cli-files', first)).code, 0);
    assert.equal((await cli('cat', 'cli-files:/root/in.txt')).stdout, 'from the host\n');
    rmSync(local, { force: true });
    rmSync(`${local}.back`, { force: true });
  });

  test('CLI tenant create prints a key that works; tenant ls lists it', async () => {
    const created = await cli('tenant', 'create', 'cli-tenant');
    assert.equal(created.code, 0, created.stderr);
    const key = created.stdout.trim();
    const other = new Shellbase({ url: t.server.url, apiKey: key });
    assert.deepEqual(await other.contexts.list(), []);
    assert.match((await cli('tenant', 'ls')).stdout, /^cli-tenant\s+t_/m);
    const second = (await cli('key', 'create', 'cli-tenant')).stdout.trim();
    const firstId = (await cli('key', 'ls', 'cli-tenant')).stdout.split('\n')[0].split(' ')[0];
    assert.equal((await cli('key', 'revoke', 'cli-tenant', firstId)).code, 0);
    await assert.rejects(other.contexts.list(), UnauthorizedError);
    assert.deepEqual(await new Shellbase({ url: t.server.url, apiKey: second }).contexts.list(), []);
  });

  test('CLI serve-app defines a service; services lists it; logs prints its log', async () => {
    const def = await cli('serve-app', 'cli-svc', 'web', '--port', '8000', '--idle', '1000', '--', 'python3 -m http.server 8000');
    assert.equal(def.code, 0, def.stderr);
    assert.match(def.stdout, /^http:\/\/[a-z2-7]{26}\.localhost:\d+\/\n$/);
    assert.match((await cli('services', 'cli-svc')).stdout, /^web\s+sleeping\s+8000  http:/);
    const logs = await cli('logs', 'cli-svc', 'web', '--tail', '5');
    assert.deepEqual([logs.code, logs.stdout], [0, ''], 'nothing ran yet');
    assert.equal((await cli('serve-app', 'cli-svc', 'web')).code, 2, 'usage error');
  });

  test('CLI usage prints a table with a total', async () => {
    const r = await cli('usage');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^context\s+queries\s+cpu ms/);
    assert.match(r.stdout, /^cli-ctx\s+\d+/m);
    assert.match(r.stdout, /^total\s+\d+/m);
  });

  test('usage errors exit 2, server errors exit 1 with the code', async () => {
    assert.equal((await cli('exec')).code, 2);
    assert.equal((await cli('frobnicate')).code, 2);
    const missing = await cli('log', 'no-such-context');
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /not_found/);
  });
});

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { ConnectionError, Shellbase } from '@shellbase/sdk';
import { closedPort, startTestServer, type TestServer } from './harness.ts';

const run = promisify(execFile);
const BIN = path.resolve('bin');

/** Runs a command with the checkout's bin/ first on PATH, as after the set-up; never throws. */
async function sh(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  try {
    const r = await run(cmd, args, { env: { ...process.env, PATH: `${BIN}:${process.env.PATH}`, ...env } });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

describe('first contact: the Node.js it runs on, the shellbase command, clear errors', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('the set-up\'s Node.js is 24 or newer, and it is the one running the suite', async () => {
    const r = await sh('node', ['--version']);
    const major = Number(/^v(\d+)\./.exec(r.stdout)?.[1]);
    assert.ok(major >= 24, `node --version said ${r.stdout}`);
    assert.equal(r.stdout.trim(), `v${process.versions.node}`);
  });

  test('shellbase is a command: by name, against a real server', async () => {
    const env = { SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
    assert.match((await sh('shellbase', ['--version'])).stdout, new RegExp(`^\\d+\\.\\d+\\.\\d+ \\(Node\\.js v${process.versions.node}\\)\\n$`));
    const r = await sh('shellbase', ['exec', 'first', '--', 'echo hello from shellbase'], env);
    assert.deepEqual([r.code, r.stdout], [0, 'hello from shellbase\n']);
  });

  test('the command started by an older Node.js (npx with the machine\'s node) runs on the set-up\'s', async (ctx) => {
    // The package's bin, as `npx shellbase` finds it, run by whatever node comes first without the checkout's bin/.
    const old = (await sh('/usr/bin/node', ['--version'])).stdout;
    if (!old || Number(/^v(\d+)\./.exec(old)?.[1]) >= 22) { ctx.skip(`no Node.js older than 22 here (${old.trim() || 'none'})`); return; }
    const launch = path.resolve('packages/cli/dist/launch.js');
    const r = await run('/usr/bin/node', [launch, '--version']);
    assert.match(r.stdout, new RegExp(`\\(Node\\.js v${process.versions.node}\\)\\n$`), `it said ${r.stdout}`);
    const e = await run('/usr/bin/node', [launch, 'exec', 'first', '--', 'exit 3'], { env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key } })
      .then(() => 0, (err: { code: number }) => err.code);
    assert.equal(e, 3, 'the command\'s exit code comes back through the launcher');
  });

  test('every CLI command refuses an unknown flag with its usage, and runs nothing', async () => {
    const help = await sh('shellbase', ['--help']);
    const names = [...help.stdout.matchAll(/^ {2}shellbase ((?:[a-z-]+)(?: (?:create|ls|revoke|snapshots|exec|code|fork|snapshot|restore|pause|resume|stop|rm|expose|commit|assets|build|network|share|disk|pull|import|hibernate|console|shell|deliveries|screen|input))?)\b/gm)].map((m) => m[1]);
    assert.ok(names.length >= 30, `commands found in the usage: ${names.join(', ')}`);
    for (const name of names) {
      const r = await sh('shellbase', [...name.split(' '), '--no-such-flag'], { SHELLBASE_URL: 'http://127.0.0.1:1' });
      assert.equal(r.code, 2, `shellbase ${name} --no-such-flag exited ${r.code}: ${r.stderr}`);
      assert.match(r.stderr, /unknown flag --no-such-flag/, name);
      assert.ok(r.stderr.includes(`usage: shellbase ${name}`), `${name}: ${r.stderr}`);
    }
    // A flag the command has not got though another command has it (serve and admin-key take --metadata, gc does not;
    // log takes --limit, contexts does not), a stray argument, and a bad number.
    assert.equal((await sh('shellbase', ['gc', '--metadata', 'postgres://x'], { SHELLBASE_URL: 'http://127.0.0.1:1' })).code, 2);
    assert.equal((await sh('shellbase', ['contexts', '--limit', '5'], { SHELLBASE_URL: 'http://127.0.0.1:1' })).code, 2);
    assert.equal((await sh('shellbase', ['contexts', 'extra'])).code, 2);
    assert.equal((await sh('shellbase', ['log', 'x', '--limit', 'many'])).code, 2);
  });

  test('a client that cannot reach its server says which URL, from where, and what to do', async () => {
    const closed = `http://127.0.0.1:${await closedPort()}`;
    const viaEnv = await sh('shellbase', ['contexts'], { SHELLBASE_URL: closed });
    assert.equal(viaEnv.code, 1);
    assert.ok(viaEnv.stderr.includes(`cannot reach the shellbase server at ${closed} (from SHELLBASE_URL): ECONNREFUSED`), viaEnv.stderr);
    assert.match(viaEnv.stderr, /shellbase serve|npm start/);
    const saved = process.env.SHELLBASE_URL;
    process.env.SHELLBASE_URL = closed;
    try {
      await assert.rejects(new Shellbase({ apiKey: 'x' }).contexts.list(), (e: unknown) =>
        e instanceof ConnectionError && e.code === 'unavailable' && (e.details as { url: string }).url === closed
        && /SHELLBASE_URL/.test(e.message) && /SHELLBASE_URL/.test(e.hint ?? ''));
      await assert.rejects(new Shellbase({ url: `${closed}/`, apiKey: 'x' }).contexts.list(), /from the url option/);
    } finally {
      if (saved === undefined) delete process.env.SHELLBASE_URL; else process.env.SHELLBASE_URL = saved;
    }
  });
});

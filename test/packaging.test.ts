import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from './harness.ts';

const run = promisify(execFile);
const checkout = path.resolve('.');
const env = { ...process.env, PATH: `${path.join(checkout, 'bin')}:${process.env.PATH}` };

/** npm run pack's tarballs, installed where a user's own project would be: outside the checkout, offline. */
describe('the SDK and the CLI install from their tarballs', () => {
  let t: TestServer;
  let tarballs: { sdk: string; cli: string };
  let wheel: string;
  const dirs: string[] = [];
  before(async () => {
    t = await startTestServer();
    const { stdout } = await run(process.execPath, ['scripts/pack.mjs'], { env });
    const [sdk, cli, whl] = stdout.trim().split('\n');
    tarballs = { sdk, cli };
    wheel = whl;
  });
  after(async () => {
    await t?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  test('the SDK: a TypeScript program type-checks against the tarball and runs against a real server', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-sdk-user-'));
    dirs.push(dir);
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'agent', private: true, type: 'module' }));
    await run('npm', ['install', '--offline', '--no-audit', '--no-fund', tarballs.sdk], { cwd: dir, env });
    writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: {
        target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, outDir: 'out',
        types: ['node'], typeRoots: [path.join(checkout, 'node_modules/@types')],
      },
      files: ['agent.ts'],
    }));
    writeFileSync(path.join(dir, 'agent.ts'), [
      "import { Shellbase, NotFoundError, type ExecResult } from '@shellbase/sdk';",
      'const sb = new Shellbase();',
      "const r: ExecResult = await sb.context('packaged').exec('echo $((6*7)) > /root/x && cat /root/x');",
      "const text: string = (await sb.context('packaged').files.read('/root/x')).toString();",
      "let missing = '';",
      "try { await sb.context('packaged').files.read('/root/none'); } catch (e) { if (e instanceof NotFoundError) missing = e.code; }",
      'console.log(JSON.stringify({ stdout: r.stdout, committed: r.committed, text, missing }));',
    ].join('\n'));
    await run(process.execPath, [path.join(checkout, 'node_modules/typescript/bin/tsc'), '-p', dir], { cwd: dir, env });
    const out = await run(process.execPath, ['out/agent.js'], { cwd: dir, env: { ...env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key } });
    assert.deepEqual(JSON.parse(out.stdout), { stdout: '42\n', committed: true, text: '42\n', missing: 'not_found' });
  });

  test('a type error in the user\'s program is caught by tsc against the tarball\'s declarations', async () => {
    const dir = dirs[0];
    writeFileSync(path.join(dir, 'agent.ts'), "import { Shellbase } from '@shellbase/sdk';\nconst n: number = (await new Shellbase().context('x').exec('true')).stdout;\n");
    await assert.rejects(run(process.execPath, [path.join(checkout, 'node_modules/typescript/bin/tsc'), '-p', dir], { cwd: dir, env }),
      (e: { stdout: string }) => /TS2322/.test(e.stdout));
  });

  test('it also writes the Python SDK\'s wheel next to the tarballs (test/python-wheel.test.ts installs it)', () => {
    assert.equal(wheel, path.join(checkout, 'dist/packages/shellbase-0.1.0-py3-none-any.whl'));
    assert.ok(existsSync(wheel));
  });

  test('the CLI: npm install -g of its tarball brings the shellbase command', async () => {
    const prefix = mkdtempSync(path.join(tmpdir(), 'shellbase-cli-global-'));
    dirs.push(prefix);
    await run('npm', ['install', '-g', '--prefix', prefix, '--offline', '--no-audit', '--no-fund', tarballs.cli], { env });
    const shellbase = path.join(prefix, 'bin', 'shellbase');
    const r = await run(shellbase, ['exec', 'packaged-cli', '--', 'echo from the global cli'], { env: { ...env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key } });
    assert.equal(r.stdout, 'from the global cli\n');
    await assert.rejects(run(shellbase, ['serve'], { env }), (e: { code: number; stderr: string }) => e.code === 2 && /client only/.test(e.stderr));
  });
});

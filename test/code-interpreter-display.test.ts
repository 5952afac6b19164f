import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';

// The code-interpreter template's display module (matplotlib figures as `e2b/chart`, pandas
// DataFrames as `e2b/data`) is tested by its own unittest suite, on Debian's Python: the one that
// has python3-matplotlib, python3-pandas, python3-numpy and python3-ipykernel (scripts/setup),
// as the template's kernels do. A python3 earlier on PATH (pyenv, a venv) has none of them.
const run = promisify(execFile);
const PYTHON = '/usr/bin/python3';
const dir = path.resolve('packages/server/templates/code-interpreter/display');

// Nothing from the caller's Python setup leaks in; no bytecode is written into the checkout.
const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PYTHON') && k !== 'MPLBACKEND'));
Object.assign(env, { PYTHONDONTWRITEBYTECODE: '1' });

test('the display module passes its unittest suite on Debian\'s python3', async () => {
  const done = await run(PYTHON, ['-m', 'unittest', '-v', 'test_shellbase_display'], { cwd: dir, env, timeout: 300_000 })
    .catch((e: { stderr?: string; message: string }) => {
      throw new Error(`${PYTHON} -m unittest failed (scripts/setup installs the Debian packages it needs):\n${e.stderr ?? e.message}`);
    });
  // unittest reports on stderr: one line per test, then "Ran N tests" and "OK".
  const ran = Number(/^Ran (\d+) tests? in /m.exec(done.stderr)?.[1] ?? 0);
  assert.ok(ran >= 30, `unittest ran ${ran} tests:\n${done.stderr}`);
  assert.match(done.stderr, /^OK$/m, done.stderr);
  assert.doesNotMatch(done.stderr, /skipped|expected failure/, 'no test is skipped');
});

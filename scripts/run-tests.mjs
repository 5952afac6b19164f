// Runs the whole test suite with Node's test runner (TypeScript through tsx).
// Unit tests first, then the integration tests against real bwrap, overlayfs, btrfs and SQLite.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const files = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith('.test.ts') ? [path.join(dir, e.name)] : []);
// Arguments name test files or directories (all the .test.ts files below them).
const only = process.argv.slice(2).flatMap((a) => (a.endsWith('.test.ts') ? [a] : files(a)));
// The soak runs for minutes: only by name (`npm run soak`), never as part of the suite.
const list = only.length ? only : [...files('test/unit'), ...files('test').filter((f) => !f.startsWith('test/unit') && !f.startsWith('test/soak'))];
if (!only.length) console.error('run-tests: test/soak is not part of the suite; run it with `npm run soak` (SHELLBASE_SOAK_MINUTES, default 10)');
// Machines' files run on their own, one after another: each keeps at most two VMs, and so does the suite.
const isMachines = (f) => /^(cluster-)?machines/.test(path.basename(f));
// Each phase's report goes to the terminal and to a file, whose failures are told again at the
// very end: a failure of the first phase is not lost above the second phase's output.
const reports = mkdtempSync(path.join(tmpdir(), 'shellbase-test-reports-'));
const run = (files, concurrency, name) => files.length === 0 ? 0
  : spawnSync(process.execPath, ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`,
    '--test-reporter=spec', '--test-reporter-destination=stdout', '--test-reporter=spec', `--test-reporter-destination=${path.join(reports, name)}`, ...files], { stdio: 'inherit' }).status ?? 1;
const first = run(list.filter((f) => !isMachines(f)), 2, 'first');
const second = run(list.filter(isMachines), 1, 'machines');
for (const [name, code] of [['first', first], ['machines', second]]) {
  if (!code) continue;
  let text = '';
  try { text = readFileSync(path.join(reports, name), 'utf8'); } catch { continue; }
  const at = text.lastIndexOf('failing tests:');
  if (at >= 0) console.log(`\nrun-tests: the ${name === 'first' ? 'first phase' : 'machines phase'}'s failures, again:\n${text.slice(Math.max(0, text.lastIndexOf('\n', at - 1) + 1))}`);
}
rmSync(reports, { recursive: true, force: true });
process.exit(first || second);

// Runs the whole test suite with Node's test runner (TypeScript through tsx).
// Unit tests first, then the integration tests against real bwrap, overlayfs, btrfs and SQLite.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';

const files = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith('.test.ts') ? [path.join(dir, e.name)] : []);
const only = process.argv.slice(2);
const list = only.length ? only : [...files('test/unit'), ...files('test').filter((f) => !f.startsWith('test/unit'))];
const r = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', ...list], { stdio: 'inherit' });
process.exit(r.status ?? 1);

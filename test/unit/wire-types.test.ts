import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { test } from 'node:test';

const run = promisify(execFile);

/**
 * docs/openapi.json and the Python SDK's _wire_types.py are generated from the TypeBox schemas in
 * packages/protocol/src/schemas (scripts/wire-types.mjs); `--check` regenerates both in memory and
 * fails naming each committed file that differs.
 */
test('the committed OpenAPI document and Python wire types are what the schemas give (npm run wire)', async () => {
  const { code, stderr } = await run(process.execPath, ['scripts/wire-types.mjs', '--check'])
    .then((r) => ({ code: 0, stderr: r.stderr }), (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }));
  assert.equal(code, 0, `scripts/wire-types.mjs --check failed:\n${stderr}`);
});

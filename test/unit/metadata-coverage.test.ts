import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

/**
 * The metadata store's conformance suite (test/conformance/metadata-store.ts) calls every method
 * of every repository the MetadataStore interface names, so a method added to a repository (and
 * to both dialects) cannot go untested. Read from the sources: the interface and the suite.
 */
test('metadata conformance: the suite calls every method of every repository', () => {
  const types = readFileSync('packages/server/src/store/metadata/types.ts', 'utf8');
  const suite = readFileSync('test/conformance/metadata-store.ts', 'utf8');
  const body = (iface: string) => {
    const m = new RegExp(`export interface ${iface} \\{([\\s\\S]*?)\\n\\}`).exec(types);
    assert.ok(m, `interface ${iface} in store/metadata/types.ts`);
    return m[1];
  };
  const repos = [...body('MetadataStore').matchAll(/^ {2}readonly (\w+): (\w+);/gm)].map((m) => ({ prop: m[1], iface: m[2] }));
  assert.ok(repos.length >= 6, `repositories found: ${repos.map((r) => r.prop).join(', ')}`);
  const missing: string[] = [];
  for (const { prop, iface } of repos) {
    const methods = [...body(iface).matchAll(/^ {2}(\w+)\(/gm)].map((m) => m[1]);
    assert.ok(methods.length > 0, `${iface} has methods`);
    for (const method of methods) if (!suite.includes(`.${prop}.${method}(`)) missing.push(`${prop}.${method}`);
  }
  assert.deepEqual(missing, [], 'methods the conformance suite never calls');
});

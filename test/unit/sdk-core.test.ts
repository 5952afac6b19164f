import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';
import { tar, tarBlob, type TarBlobInput } from '../../packages/sdk/src/core/tar.ts';

/**
 * `@shellbase/sdk/core` runs in browsers (the web console is built on it): nothing its import
 * graph reaches may import a Node module or use Node's globals. The graph is read from the
 * sources (TypeScript's own parser) through the workspace packages it imports (their `exports`,
 * dist mapped back to src), type-only imports included, since a type from `node:` breaks a
 * browser project's type check as surely as a value breaks its bundle. Any other package must be
 * a declared dependency of the workspace package that imports it (it is not walked).
 */
const CORE = path.resolve('packages/sdk/src/core/index.ts');
const WORKSPACE_DIRS: Record<string, string> = { '@shellbase/protocol': path.resolve('packages/protocol'), '@shellbase/sdk': path.resolve('packages/sdk') };
const NODE_GLOBALS = new Set(['Buffer', 'process', 'require', 'module', '__dirname', '__filename', 'global', 'NodeJS', 'setImmediate']);

/** Whether `id` names something of its own (a property, a member, a declaration) rather than referring to a global. */
function isOwnName(id: ts.Identifier): boolean {
  const p = id.parent;
  if (ts.isPropertyAccessExpression(p)) return p.name === id;
  if (ts.isQualifiedName(p)) return p.right === id;
  return (ts.isPropertyAssignment(p) || ts.isPropertySignature(p) || ts.isPropertyDeclaration(p) || ts.isMethodDeclaration(p)
    || ts.isMethodSignature(p) || ts.isVariableDeclaration(p) || ts.isParameter(p) || ts.isFunctionDeclaration(p)) && p.name === id;
}

const packageJson = (dir: string) => JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as
  { exports: Record<string, { default: string }>; dependencies?: Record<string, string> };

/** The source file a workspace package's specifier (`@shellbase/protocol`, `@shellbase/protocol/schemas`) names, if it is one. */
function workspaceSource(spec: string): string | undefined {
  const name = Object.keys(WORKSPACE_DIRS).find((n) => spec === n || spec.startsWith(`${n}/`));
  if (!name) return undefined;
  const target = packageJson(WORKSPACE_DIRS[name]).exports[`.${spec.slice(name.length)}`]?.default;
  assert.ok(target, `${spec} is in its package's exports`);
  return path.join(WORKSPACE_DIRS[name], target.replace(/^\.\/dist\//, 'src/').replace(/\.js$/, '.ts'));
}

/** The dependencies declared by the workspace package that holds `file`. */
function declaredDependencies(file: string): string[] {
  const dir = Object.values(WORKSPACE_DIRS).find((d) => file.startsWith(`${d}/`));
  return dir ? Object.keys(packageJson(dir).dependencies ?? {}) : [];
}

const isNodeModule = (spec: string) => spec.startsWith('node:') || builtinModules.includes(spec.split('/')[0]!);

/** The files the graph from `entry` reaches, and what in them a browser lacks. */
function browserCheck(entry: string): { files: string[]; problems: string[] } {
  const seen = new Set<string>();
  const problems: string[] = [];
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = readFileSync(file, 'utf8');
    const rel = path.relative(process.cwd(), file);
    for (const { fileName: spec } of ts.preProcessFile(text, true, true).importedFiles) {
      const inWorkspace = workspaceSource(spec);
      if (spec.startsWith('.')) visit(path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')));
      else if (inWorkspace) visit(inWorkspace);
      else if (isNodeModule(spec)) problems.push(`${rel} imports ${spec} (a Node module)`);
      else if (!declaredDependencies(file).includes(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!)) {
        problems.push(`${rel} imports ${spec} (not a dependency its package declares)`);
      }
    }
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
    const walk = (n: ts.Node): void => {
      if (ts.isIdentifier(n) && NODE_GLOBALS.has(n.text) && !isOwnName(n)) {
        const { line } = source.getLineAndCharacterOfPosition(n.getStart());
        problems.push(`${rel}:${line + 1} uses Node's ${n.text}`);
      }
      ts.forEachChild(n, walk);
    };
    walk(source);
  };
  visit(entry);
  return { files: [...seen].map((f) => path.relative(process.cwd(), f)), problems };
}

test('sdk core: its import graph reaches no Node module, no undeclared package and no Node global', () => {
  const { files, problems } = browserCheck(CORE);
  assert.deepEqual(problems, []);
  for (const f of ['packages/sdk/src/core/client.ts', 'packages/sdk/src/core/tar.ts', 'packages/sdk/src/core/ndjson.ts', 'packages/protocol/src/errors.ts']) {
    assert.ok(files.includes(f), `the walk reached ${f} (${files.join(', ')})`);
  }
});

test('sdk core: the same check finds Node in the SDK\'s Node entry (so it can fail)', () => {
  const { problems } = browserCheck(path.resolve('packages/sdk/src/index.ts'));
  assert.ok(problems.includes('packages/sdk/src/client.ts imports node:fs (a Node module)'), problems.join('\n'));
  assert.ok(problems.some((p) => /^packages\/sdk\/src\/client\.ts:\d+ uses Node's process$/.test(p)), problems.join('\n'));
  assert.ok(problems.some((p) => /^packages\/sdk\/src\/context\.ts:\d+ uses Node's Buffer$/.test(p)), problems.join('\n'));
});

test('sdk core: published as @shellbase/sdk/core, built from the sources checked here', () => {
  const pkg = JSON.parse(readFileSync('packages/sdk/package.json', 'utf8')) as { exports: Record<string, { types: string; default: string }> };
  assert.deepEqual(pkg.exports['./core'], { types: './dist/core/index.d.ts', default: './dist/core/index.js' });
});

test('sdk core: tarBlob writes the bytes tar writes, with Blob data referenced as it is', async () => {
  const entries: TarBlobInput[] = [
    { path: 'dir', type: 'dir', mtime: 1_700_000_000 },
    { path: 'dir/a.txt', data: 'hello\n', mode: 0o600, mtime: 1_700_000_000.9 },
    { path: `long/${'n'.repeat(120)}`, data: new Uint8Array(513).fill(7), mtime: 1 },
    { path: 'ünïcode/名前.txt', data: 'x', uid: 0o10000000, gid: 5, mtime: 2 },
    { path: 'link', type: 'symlink', linkname: 't'.repeat(150), mtime: 3 },
    { path: 'empty', data: '', mtime: 4 },
  ];
  const inMemory = tar(entries.map((e) => ({ ...e, data: e.data as Uint8Array | string | undefined })));
  const asBlob = tarBlob(entries.map((e) => (e.data instanceof Uint8Array ? { ...e, data: new Blob([e.data as Uint8Array<ArrayBuffer>]) } : e)));
  assert.equal(asBlob.type, 'application/x-tar');
  assert.deepEqual(new Uint8Array(await asBlob.arrayBuffer()), inMemory);
  assert.equal(inMemory.length % 512, 0);
  // The long name went into a pax header (type x) before its entry's own header.
  const types = [];
  for (let at = 0; at + 512 <= inMemory.length; at += 512) {
    const block = inMemory.subarray(at, at + 512);
    if (block.every((b) => b === 0)) continue;
    if (new TextDecoder().decode(block.subarray(257, 262)) !== 'ustar') continue;
    types.push(String.fromCharCode(block[156]));
  }
  assert.deepEqual(types, ['5', '0', 'x', '0', 'x', '0', 'x', '2', '0']);
});

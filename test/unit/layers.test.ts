import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';

/**
 * The layer order of docs/architecture.md ("Layers"), enforced: no TypeScript file imports one
 * of a higher layer, or of another folder of its own layer, and no files import each other in a
 * loop. Ranks are the server's folders (and top files), bottom first; the packages have an order
 * of their own.
 */
const SERVER_LAYERS: string[][] = [
  ['errors.ts'],
  ['util'],
  ['store'],
  ['runtime'],
  ['images'],
  ['meter'],
  ['net', 'trust'],
  ['config.ts'],
  ['events'],
  ['core'],
  ['cluster'],
  ['engine', 'machines'],
  ['ops'],
  ['api'],
  ['compat'],
  ['server.ts'],
  ['index.ts'],
];

/** Which packages a package's sources may import (by name: `@shellbase/NAME`). */
const PACKAGES: Record<string, string[]> = {
  protocol: [],
  sdk: ['protocol'],
  server: ['protocol'],
  console: ['protocol', 'sdk'],
  cli: ['protocol', 'sdk', 'server'],
};

const root = path.resolve(import.meta.dirname, '../..');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) return name === 'node_modules' || name === 'dist' ? [] : sources(p);
    return /\.tsx?$/.test(name) && !name.endsWith('.d.ts') ? [p] : [];
  });
}

/** Every source file's imports: files of the repository (resolved) and packages (by specifier). */
function imports(file: string): { files: string[]; packages: string[] } {
  const info = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
  const files: string[] = [];
  const packages: string[] = [];
  for (const { fileName: spec } of info.importedFiles) {
    if (!spec.startsWith('.')) { packages.push(spec); continue; }
    if (!/\.(js|ts|tsx)$/.test(spec) && /\.\w+$/.test(spec)) continue; // a stylesheet or an asset (the console's bundler takes those)
    const base = path.resolve(path.dirname(file), spec).replace(/\.js$/, '');
    const found = [`${base}.ts`, `${base}.tsx`, path.join(base, 'index.ts')].find((c) => existsSync(c));
    assert.ok(found, `${path.relative(root, file)} imports ${spec}, which is not a source file`);
    files.push(found);
  }
  return { files, packages };
}

const packages = readdirSync(path.join(root, 'packages')).filter((p) => existsSync(path.join(root, 'packages', p, 'src')));
const graph = new Map<string, ReturnType<typeof imports>>();
for (const p of packages) for (const f of sources(path.join(root, 'packages', p, 'src'))) graph.set(f, imports(f));

/** Strongly connected components of more than one file (or a file importing itself). */
function loops(): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next); low.set(v, next); next++;
    stack.push(v); onStack.add(v);
    for (const w of graph.get(v)?.files ?? []) {
      if (!index.has(w)) { visit(w); low.set(v, Math.min(low.get(v)!, low.get(w)!)); } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const c: string[] = [];
      let w: string;
      do { w = stack.pop()!; onStack.delete(w); c.push(w); } while (w !== v);
      if (c.length > 1 || graph.get(v)!.files.includes(v)) found.push(c.map((f) => path.relative(root, f)).sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

test('no TypeScript files import each other in a loop', () => {
  assert.ok(graph.size > 200, `read ${graph.size} files`);
  assert.deepEqual(loops(), []);
});

test('the server\'s layers: no import runs upward or sideways between folders of one layer', () => {
  const serverSrc = path.join(root, 'packages/server/src');
  const unit = (f: string) => path.relative(serverSrc, f).split(path.sep)[0]!;
  const rank = new Map(SERVER_LAYERS.flatMap((units, i) => units.map((u) => [u, i] as const)));
  const wrong: string[] = [];
  for (const [file, { files }] of graph) {
    if (!file.startsWith(serverSrc + path.sep)) continue;
    const from = unit(file);
    assert.ok(rank.has(from), `packages/server/src/${from} has no layer: add it to SERVER_LAYERS and to docs/architecture.md`);
    for (const target of files) {
      const to = unit(target);
      if (to === from) continue;
      if (rank.get(to)! >= rank.get(from)!) wrong.push(`${path.relative(root, file)} → ${path.relative(root, target)} (${from} is layer ${rank.get(from)}, ${to} is ${rank.get(to)})`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('packages import only the packages below them, and never another package\'s files by path', () => {
  const wrong: string[] = [];
  for (const [file, { files, packages: specs }] of graph) {
    const own = path.relative(path.join(root, 'packages'), file).split(path.sep)[0]!;
    for (const spec of specs) {
      const m = /^@shellbase\/([^/]+)/.exec(spec);
      if (m && !PACKAGES[own]!.includes(m[1]!)) wrong.push(`${path.relative(root, file)} imports ${spec}`);
    }
    for (const target of files) {
      const other = path.relative(path.join(root, 'packages'), target).split(path.sep)[0];
      if (other !== own) wrong.push(`${path.relative(root, file)} reaches into packages/${other} by path`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('front doors (api/, compat/) reach the server only through ops/: no engine, no store, no Deps', () => {
  const src = path.join(root, 'packages/server/src');
  const doors = ['api', 'compat'].map((d) => path.join(src, d) + path.sep);
  const wrong: string[] = [];
  for (const [file, { files }] of graph) {
    if (!doors.some((d) => file.startsWith(d))) continue;
    for (const target of files) {
      const rel = path.relative(src, target);
      // machines/index.ts is the machines' public face: their records' and guest agent's types.
      if (rel.startsWith(`engine${path.sep}`) || rel.startsWith(`store${path.sep}`) || (rel.startsWith(`machines${path.sep}`) && rel !== path.join('machines', 'index.ts'))) {
        wrong.push(`${path.relative(root, file)} imports ${path.relative(root, target)}`);
      }
    }
    const text = readFileSync(file, 'utf8');
    if (/\bDeps\b/.test(text) || /import[^;]*\{[^}]*\bMachines\b[^}]*\}\s*from '[^']*machines\/index\.js'/.test(text)) wrong.push(`${path.relative(root, file)} names Deps, or imports the Machines service`);
  }
  assert.deepEqual(wrong, []);
});

// npm run pack: writes installable tarballs of the SDK and the CLI into dist/packages/ (after the
// set-up's build). Each installs without any registry: the SDK bundles @shellbase/protocol (its only
// dependency); the CLI bundles every dependency it has (the SDK, the protocol, the MCP SDK, zod and
// what they need), copied from this checkout's node_modules at the versions the lock file pins.
// It also writes the Python SDK's pure-Python wheel (scripts/python-wheel.mjs), which pip installs
// with --no-index into any Python >= 3.11's virtual environment. It prints each file's path.
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildWheel } from './python-wheel.mjs';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const out = path.join(root, 'dist/packages');
const dirOf = { '@shellbase/protocol': 'protocol', '@shellbase/sdk': 'sdk', '@shellbase/cli': 'cli' };

/** Copies a workspace package as npm would publish it: its `files`, package.json, and bundled workspace deps. */
function stage(name, into) {
  const src = path.join(root, 'packages', dirOf[name]);
  const pkg = JSON.parse(readFileSync(path.join(src, 'package.json'), 'utf8'));
  if (!existsSync(path.join(src, 'dist'))) throw new Error(`${name} is not built: run npm run build`);
  mkdirSync(into, { recursive: true });
  cpSync(path.join(src, 'dist'), path.join(into, 'dist'), { recursive: true, filter: (f) => !f.endsWith('.map') && !f.endsWith('.tsbuildinfo') });
  for (const f of ['README.md']) if (existsSync(path.join(src, f))) cpSync(path.join(src, f), path.join(into, f));
  cpSync(path.join(root, 'LICENSE'), path.join(into, 'LICENSE'));
  delete pkg.devDependencies;
  delete pkg.private;
  writeFileSync(path.join(into, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
  for (const dep of pkg.bundleDependencies ?? []) stage(dep, path.join(into, 'node_modules', dep));
  if (pkg.bundleRegistryDependencies) {
    // Every registry package the CLI needs, with what they need, from the checkout's (hoisted) tree.
    const seen = new Set();
    const todo = Object.keys(pkg.dependencies ?? {}).filter((d) => !(d in dirOf));
    while (todo.length) {
      const dep = todo.pop();
      if (seen.has(dep)) continue;
      seen.add(dep);
      const dir = path.join(root, 'node_modules', dep);
      cpSync(dir, path.join(into, 'node_modules', dep), { recursive: true, dereference: true });
      const own = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
      for (const d of Object.keys({ ...own.dependencies, ...own.peerDependencies })) {
        // A dependency with its own copy below the package came along with it.
        if (!existsSync(path.join(dir, 'node_modules', d)) && existsSync(path.join(root, 'node_modules', d))) todo.push(d);
      }
    }
    pkg.bundleDependencies = Object.keys(pkg.dependencies);
    delete pkg.bundleRegistryDependencies;
    writeFileSync(path.join(into, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
  }
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
for (const name of ['@shellbase/sdk', '@shellbase/cli']) {
  const staging = mkdtempSync(path.join(tmpdir(), 'shellbase-pack-'));
  try {
    stage(name, staging);
    const file = execFileSync('npm', ['pack', '--silent', '--pack-destination', out], { cwd: staging, encoding: 'utf8' }).trim().split('\n').pop();
    console.log(path.join(out, file));
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
console.log(buildWheel({ outDir: out }));

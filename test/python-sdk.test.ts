import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { Shellbase } from '@shellbase/sdk';
import { startTestServer, type TestServer } from './harness.ts';
// @ts-expect-error: a plain ESM script of the repository, without type declarations
import { buildWheel } from '../scripts/python-wheel.mjs';

// The Python SDK (packages/python), installed the documented way into a fresh virtual environment
// (its wheel, written by scripts/python-wheel.mjs, with no package index), then its unittest suite
// against a real server. The suite's machine round trip boots a template the first time: allow for it.
const run = promisify(execFile);
const checkout = path.resolve('.');
const SYSTEM_PYTHON = '/usr/bin/python3';
const SUITE_TIMEOUT_MS = 25 * 60_000;

/**
 * TypeScript names whose Python equivalent is named differently (after camelCase -> snake_case):
 * Python says `delete` everywhere (as `contexts.delete` and `context.delete` do in both SDKs), and
 * `upload_tar` is Python's name for `writeTar`; `import` is a keyword in Python (`images.import_archive`).
 */
const RENAMED: Record<string, string> = { remove: 'delete', writeTar: 'upload_tar', import: 'import_archive' };
/** TypeScript members with no Python equivalent, each with the reason (`where.name`). None today. */
const ONLY_IN_TYPESCRIPT: Record<string, string> = {
  'machine.runCodeStream': 'Python reads a cell whole (run_code); its callbacks are the TypeScript SDK\'s',
};

const snake = (name: string) => RENAMED[name] ?? name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();

/** The TypeScript SDK's public members: own properties and prototype methods, less what its .d.ts declares private. */
function tsMembers(obj: object, privates: Set<string>): string[] {
  const names = new Set(Object.keys(obj));
  for (let proto = Object.getPrototypeOf(obj); proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    for (const n of Object.getOwnPropertyNames(proto)) if (n !== 'constructor') names.add(n);
  }
  return [...names].filter((n) => !privates.has(n) && !n.startsWith('_')).sort();
}

/** Names the SDK's declaration files mark `private` (runtime objects still carry them). */
function sdkPrivates(): Set<string> {
  const dist = path.dirname(fileURLToPath(import.meta.resolve('@shellbase/sdk')));
  const names = new Set<string>();
  // The Node entry's classes and the browser-safe core's they extend (dist/core/).
  for (const dir of [dist, path.join(dist, 'core')]) {
    for (const f of readdirSync(dir).filter((f) => f.endsWith('.d.ts'))) {
      for (const m of readFileSync(path.join(dir, f), 'utf8').matchAll(/^\s*(?:private|protected) (?:readonly )?(\w+)/gm)) names.add(m[1]);
    }
  }
  return names;
}

// The same objects on both sides, by the path a caller reaches them.
const PY_SURFACE = `
import json, shellbase
from shellbase import Shellbase
sb = Shellbase("http://127.0.0.1:1", "k")
objects = {
    "Shellbase": sb, "contexts": sb.contexts, "tenants": sb.tenants, "machines": sb.machines, "images": sb.images,
    "events": sb.events, "webhooks": sb.webhooks,
    "context": sb.context("c"), "context.files": sb.context("c").files, "context.services": sb.context("c").services,
    "context.network": sb.context("c").network,
    "machine": sb.machines.get("m"), "machine.files": sb.machines.get("m").files,
}
print(json.dumps({"file": shellbase.__file__, "members": {k: sorted(n for n in dir(o) if not n.startswith("_")) for k, o in objects.items()}}))
`;

/** Runs a command to its end, without blocking the event loop (the server under test runs in this process). */
function runToEnd(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number }): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => { output += c.toString(); });
    child.stderr.on('data', (c: Buffer) => { output += c.toString(); });
    const timer = setTimeout(() => { output += `\n[killed after ${opts.timeoutMs} ms]\n`; child.kill('SIGKILL'); }, opts.timeoutMs);
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('close', (code) => { clearTimeout(timer); resolve({ code, output }); });
  });
}

describe('the Python SDK', { timeout: SUITE_TIMEOUT_MS + 5 * 60_000 }, () => {
  let t: TestServer;
  let venv: string;
  let python: string;
  // pip sees no configuration, no wheel directories and no cache: the install can only take the wheel it is given.
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PIP_')));
  Object.assign(env, { PYTHONDONTWRITEBYTECODE: '1', PYTHONUNBUFFERED: '1', PIP_CONFIG_FILE: '/dev/null', PIP_NO_CACHE_DIR: '1', PIP_DISABLE_PIP_VERSION_CHECK: '1' });

  before(async () => {
    try {
      await run(SYSTEM_PYTHON, ['-c', 'import sys, ensurepip; assert sys.version_info >= (3, 11)'], { env });
    } catch (e) {
      throw new Error(`${SYSTEM_PYTHON} (>= 3.11) with venv is needed: apt-get install python3-venv\n${(e as Error).message}`);
    }
    t = await startTestServer();
    venv = mkdtempSync(path.join(tmpdir(), 'shellbase-python-'));
    await run(SYSTEM_PYTHON, ['-m', 'venv', venv], { env });
    python = path.join(venv, 'bin/python');
    // The documented install: the wheel `npm run pack` writes, no package index.
    const wheel = buildWheel({ outDir: path.join(venv, 'dist') });
    await run(path.join(venv, 'bin/pip'), ['install', '--no-index', wheel], { cwd: venv, env });
  });

  after(async () => {
    await t?.close();
    if (venv) rmSync(venv, { recursive: true, force: true });
  });

  test('has an equivalent of every public method of the TypeScript SDK', async () => {
    const { stdout } = await run(python, ['-c', PY_SURFACE], { cwd: venv, env });
    const py = JSON.parse(stdout) as { file: string; members: Record<string, string[]> };
    assert.ok(py.file.startsWith(venv), `shellbase imported from the virtual environment, not ${py.file}`);
    const sb = new Shellbase({ url: 'http://127.0.0.1:1', apiKey: 'k' });
    const ts: Record<string, object> = {
      Shellbase: sb, contexts: sb.contexts, tenants: sb.tenants, machines: sb.machines, images: sb.images,
      events: sb.events, webhooks: sb.webhooks,
      context: sb.context('c'), 'context.files': sb.context('c').files, 'context.services': sb.context('c').services,
      'context.network': sb.context('c').network,
      machine: sb.machines.get('m'), 'machine.files': sb.machines.get('m').files,
    };
    const privates = sdkPrivates();
    const missing: string[] = [];
    let compared = 0;
    for (const [where, obj] of Object.entries(ts)) {
      const have = new Set(py.members[where] ?? []);
      for (const name of tsMembers(obj, privates)) {
        compared++;
        if (ONLY_IN_TYPESCRIPT[`${where}.${name}`]) continue;
        if (!have.has(snake(name))) missing.push(`${where}.${name} (Python: ${where}.${snake(name)})`);
      }
    }
    assert.ok(compared >= 50, `the walk found only ${compared} TypeScript members`);
    assert.deepEqual(missing, [], `the Python SDK lacks: ${missing.join(', ')}`);
  });

  test('passes its unittest suite against a real server', async () => {
    const started = Date.now();
    const r = await runToEnd(python, ['-m', 'unittest', 'discover', '-s', 'packages/python/tests', '-v'], {
      cwd: checkout, timeoutMs: SUITE_TIMEOUT_MS,
      env: { ...env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key },
    });
    assert.equal(r.code, 0, `python -m unittest failed (exit ${r.code}):\n${r.output}`);
    const ran = /^Ran (\d+) tests? in ([\d.]+)s$/m.exec(r.output);
    assert.ok(ran && Number(ran[1]) >= 30, `expected the whole suite to run:\n${r.output}`);
    assert.match(r.output, /^OK$/m);
    console.log(`python: ${ran[0]} (${Math.round((Date.now() - started) / 1000)} s with the interpreter)`);
  });
});

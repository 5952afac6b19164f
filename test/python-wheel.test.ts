import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';

// The Python SDK's wheel, built by scripts/python-wheel.mjs (what `npm run pack` writes into
// dist/packages/), installed with `pip install --no-index` into a virtual environment that has no
// `wheel` module: the install the README documents, on a Python without Debian's system packages.
const run = promisify(execFile);
const checkout = path.resolve('.');
const pkg = path.join(checkout, 'packages/python');
const PYTHON = 'python3';
const pyproject = readFileSync(path.join(pkg, 'pyproject.toml'), 'utf8');
const field = (name: string) => new RegExp(`^${name} = "([^"]*)"$`, 'm').exec(pyproject)?.[1];
const VERSION = field('version');
const REQUIRES_PYTHON = field('requires-python');

// pip sees no configuration and no cache; nothing from the caller's Python environment leaks in.
const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PIP_') && !k.startsWith('PYTHON')));
Object.assign(env, { PYTHONDONTWRITEBYTECODE: '1', PIP_CONFIG_FILE: '/dev/null', PIP_NO_CACHE_DIR: '1', PIP_DISABLE_PIP_VERSION_CHECK: '1' });

/** The files a wheel must carry: every .py file and py.typed of the package's source tree, as paths from src/. */
function sourceFiles(dir = path.join(pkg, 'src/shellbase'), rel = 'shellbase'): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? (e.name === '__pycache__' ? [] : sourceFiles(path.join(dir, e.name), `${rel}/${e.name}`))
      : e.name.endsWith('.py') || e.name === 'py.typed' ? [`${rel}/${e.name}`] : []).sort();
}

// Reads the wheel with Python's own zipfile: CRCs, RECORD (each hash and size), WHEEL and METADATA.
const INSPECT = `
import base64, csv, email.parser, hashlib, io, json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
record = [n for n in names if n.endswith(".dist-info/RECORD")]
rows = list(csv.reader(io.StringIO(z.read(record[0]).decode())))
problems = []
for name, digest, size in rows:
    if name == record[0]:
        if digest or size: problems.append("RECORD gives itself a hash or size")
        continue
    data = z.read(name)
    algo, _, value = digest.partition("=")
    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    if algo != "sha256" or value != want: problems.append(f"{name}: hash {digest}, the file's is sha256={want}")
    if size != str(len(data)): problems.append(f"{name}: size {size}, the file's is {len(data)}")
info = record[0].rsplit("/", 1)[0]
wheel = email.parser.Parser().parsestr(z.read(info + "/WHEEL").decode())
meta = email.parser.Parser().parsestr(z.read(info + "/METADATA").decode())
print(json.dumps({
    "bad_crc": z.testzip(), "names": names, "records": [r[0] for r in rows], "problems": problems, "last": names[-1] == record[0],
    "wheel": {k: wheel[k] for k in ("Wheel-Version", "Root-Is-Purelib", "Tag")},
    "meta": {k: meta[k] for k in ("Metadata-Version", "Name", "Version", "Requires-Python", "Summary")},
}))
`;

const INSTALLED = `
import importlib.metadata as md, importlib.resources as resources, json, shellbase
print(json.dumps({
    "file": shellbase.__file__, "version": shellbase.__version__, "dist_version": md.version("shellbase"),
    "requires_python": md.metadata("shellbase")["Requires-Python"],
    "clients": [c.__name__ for c in (shellbase.Shellbase, shellbase.AsyncShellbase)],
    "typed": resources.files("shellbase").joinpath("py.typed").is_file(),
    "files": sorted(str(f) for f in md.files("shellbase") if str(f).startswith("shellbase/") and not str(f).endswith(".pyc")),
}))
`;

describe('the Python SDK\'s wheel', () => {
  const dirs: string[] = [];
  const temp = (prefix: string) => { const d = mkdtempSync(path.join(tmpdir(), prefix)); dirs.push(d); return d; };
  let wheel: string;
  let again: string;

  before(async () => {
    assert.ok(VERSION && REQUIRES_PYTHON, 'packages/python/pyproject.toml names a version and requires-python');
    wheel = (await run(process.execPath, ['scripts/python-wheel.mjs', temp('shellbase-wheel-')], { env })).stdout.trim();
    again = (await run(process.execPath, ['scripts/python-wheel.mjs', temp('shellbase-wheel-')], { env })).stdout.trim();
  });
  after(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

  test('is named for the pyproject\'s version, and two builds are the same bytes', () => {
    assert.equal(path.basename(wheel), `shellbase-${VERSION}-py3-none-any.whl`);
    assert.equal(path.basename(again), path.basename(wheel));
    const a = readFileSync(wheel);
    assert.ok(a.length > 10_000, `a wheel of ${a.length} bytes`);
    assert.ok(a.equals(readFileSync(again)), 'the two builds differ');
  });

  test('is a valid zip whose RECORD verifies, with the metadata of the pyproject', async () => {
    const out = JSON.parse((await run(PYTHON, ['-c', INSPECT, wheel], { env })).stdout);
    assert.equal(out.bad_crc, null);
    assert.deepEqual(out.problems, []);
    assert.deepEqual([...out.records].sort(), [...out.names].sort(), 'RECORD lists exactly the files in the wheel');
    assert.equal(new Set(out.names).size, out.names.length, 'no name twice');
    assert.ok(out.last, 'RECORD is the last entry');
    const info = `shellbase-${VERSION}.dist-info/`;
    assert.deepEqual(out.names.filter((n: string) => !n.startsWith(info)), sourceFiles());
    assert.deepEqual(out.wheel, { 'Wheel-Version': '1.0', 'Root-Is-Purelib': 'true', Tag: 'py3-none-any' });
    assert.deepEqual(out.meta, {
      'Metadata-Version': '2.1', Name: 'shellbase', Version: VERSION, 'Requires-Python': REQUIRES_PYTHON, Summary: field('description'),
    });
  });

  test('installs with pip --no-index into a venv that has no wheel module, and imports', async () => {
    await run(PYTHON, ['-c', 'import sys; assert sys.version_info >= (3, 11), sys.version'], { env })
      .catch((e) => { throw new Error(`${PYTHON} on PATH must be Python >= 3.11: ${(e as Error).message}`); });
    const venv = temp('shellbase-wheel-venv-');
    await run(PYTHON, ['-m', 'venv', venv], { env });
    const python = path.join(venv, 'bin/python');
    // What makes a source install fail with "invalid command 'bdist_wheel'": no wheel package here.
    await assert.rejects(run(python, ['-c', 'import wheel'], { cwd: venv, env }),
      (e: { stderr: string }) => /ModuleNotFoundError: No module named 'wheel'/.test(e.stderr));
    await run(python, ['-m', 'pip', 'install', '--no-index', wheel], { cwd: venv, env });
    const got = JSON.parse((await run(python, ['-c', INSTALLED], { cwd: venv, env })).stdout);
    assert.ok(got.file.startsWith(venv), `shellbase imported from the virtual environment, not ${got.file}`);
    assert.equal(got.version, VERSION);
    assert.equal(got.dist_version, VERSION);
    assert.equal(got.requires_python, REQUIRES_PYTHON);
    assert.deepEqual(got.clients, ['Shellbase', 'AsyncShellbase']);
    assert.equal(got.typed, true);
    assert.deepEqual(got.files, sourceFiles());
  });
});

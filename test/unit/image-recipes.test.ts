import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { contextOf } from '../../packages/sdk/src/images.ts';
import { contextDigest, contextEntries, dockerfileTag, imageInfo, imageMachineDefaults, IMAGE_NAMES } from '../../packages/server/src/images/index.ts';
import { CODE_INTERPRETER_CONTEXT, codeInterpreterRecipe } from '../../packages/server/src/images/code-interpreter.ts';
import { DESKTOP_CONTEXT, desktopRecipe } from '../../packages/server/src/images/desktop.ts';
import { debianRecipe } from '../../packages/server/src/images/debian.ts';
import { readTar } from '../../packages/server/src/util/tar.ts';

/** A build context in a fresh directory: `files` maps relative paths to contents (`->target` makes a symlink). */
function context(files: Record<string, string>): { dir: string; [Symbol.dispose](): void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-context-'));
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    if (content.startsWith('->')) symlinkSync(content.slice(2), path.join(dir, rel));
    else writeFileSync(path.join(dir, rel), content);
  }
  return { dir, [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }) };
}

const FILES = {
  Dockerfile: 'FROM debian\nCOPY app/ /app/\n',
  '.dockerignore': 'README.md\n**/__pycache__\n**/test_*.py\n',
  'app/main.py': 'print(1)\n',
  'app/lib/util.py': 'X = 1\n',
  'app/link': '->main.py',
  'app/test_main.py': 'assert True\n',
  'app/__pycache__/main.cpython-311.pyc': 'bytecode',
  'README.md': 'about it\n',
};

test('a build context\'s digest changes with what a build copies (bytes, modes, names, links), not with what .dockerignore leaves out or times', () => {
  using c = context(FILES);
  const at = (rel: string) => path.join(c.dir, rel);
  const before = contextDigest(c.dir);
  assert.match(before, /^[0-9a-f]{64}$/);
  assert.equal(contextDigest(c.dir), before, 'the same files, the same digest');
  writeFileSync(at('README.md'), 'more about it\n');
  writeFileSync(at('app/test_main.py'), 'assert False\n');
  writeFileSync(at('app/__pycache__/util.cpython-311.pyc'), 'more bytecode');
  utimesSync(at('app/main.py'), new Date(0), new Date(0));
  assert.equal(contextDigest(c.dir), before, 'ignored files and times are not part of it');
  const changed = (what: string, change: () => void, undo: () => void) => {
    change();
    assert.notEqual(contextDigest(c.dir), before, what);
    undo();
    assert.equal(contextDigest(c.dir), before, `${what}, undone`);
  };
  changed('a file\'s bytes', () => writeFileSync(at('app/main.py'), 'print(2)\n'), () => writeFileSync(at('app/main.py'), 'print(1)\n'));
  changed('the Dockerfile', () => writeFileSync(at('Dockerfile'), 'FROM debian\n'), () => writeFileSync(at('Dockerfile'), FILES.Dockerfile));
  changed('a mode', () => chmodSync(at('app/main.py'), 0o755), () => chmodSync(at('app/main.py'), 0o644));
  changed('a new file', () => writeFileSync(at('app/new.py'), ''), () => rmSync(at('app/new.py')));
  changed('a symlink\'s target', () => { rmSync(at('app/link')); symlinkSync('lib/util.py', at('app/link')); },
    () => { rmSync(at('app/link')); symlinkSync('main.py', at('app/link')); });
  changed('a new directory', () => mkdirSync(at('app/empty')), () => rmSync(at('app/empty'), { recursive: true }));
});

test('a build context is what the SDK sends: the same entries after .dockerignore', async () => {
  using c = context(FILES);
  const sent: string[] = [];
  for await (const e of readTar(contextOf(c.dir) as AsyncIterable<Buffer>)) sent.push(`${e.header.type} ${e.header.path}`);
  const mine = contextEntries(c.dir).map((e) => `${e.type} ${e.path}`);
  assert.deepEqual(new Set(mine), new Set(sent));
  assert.ok(!mine.some((e) => /README|test_main|__pycache__/.test(e)), mine.join('\n'));
  assert.ok(mine.includes('file .dockerignore') && mine.includes('file Dockerfile') && mine.includes('symlink app/link'));
});

test('a Dockerfile image\'s tag: its recipe\'s version, then a hash of the recipe, the base image\'s tag and the context\'s digest', () => {
  const tag = dockerfileTag(codeInterpreterRecipe, '5-aaaaaaaa', 'c'.repeat(64));
  assert.match(tag, /^1-[0-9a-f]{8}$/);
  assert.equal(dockerfileTag(codeInterpreterRecipe, '5-aaaaaaaa', 'c'.repeat(64)), tag);
  assert.notEqual(dockerfileTag(codeInterpreterRecipe, '6-bbbbbbbb', 'c'.repeat(64)), tag, 'a new debian image is a new image');
  assert.notEqual(dockerfileTag(codeInterpreterRecipe, '5-aaaaaaaa', 'd'.repeat(64)), tag, 'new files are a new image');
  assert.match(dockerfileTag({ ...codeInterpreterRecipe, version: 2 }, '5-aaaaaaaa', 'c'.repeat(64)), /^2-/);
});

test('built-in images: debian\'s tag is its recipe\'s hash; code-interpreter\'s is made of the template directory and debian\'s tag', () => {
  assert.deepEqual(IMAGE_NAMES, ['debian', 'code-interpreter', 'desktop']);
  const cache = '/nonexistent/cache';
  const debian = imageInfo(cache, 'debian');
  const hash = createHash('sha256').update(JSON.stringify(debianRecipe)).digest('hex').slice(0, 8);
  assert.equal(debian.tag, `${debianRecipe.version}-${hash}`);
  const ci = imageInfo(cache, 'code-interpreter');
  assert.equal(ci.tag, dockerfileTag(codeInterpreterRecipe, debian.tag, contextDigest(CODE_INTERPRETER_CONTEXT)));
  assert.deepEqual([ci.layerId, ci.rootfs], [`image:code-interpreter:${ci.tag}`, `${cache}/images/code-interpreter/${ci.tag}/rootfs`]);
  assert.equal(path.basename(CODE_INTERPRETER_CONTEXT), 'code-interpreter');
  const sent = contextEntries(CODE_INTERPRETER_CONTEXT).map((e) => e.path);
  for (const p of ['Dockerfile', 'shellbase-code-interpreter.service', 'display']) assert.ok(sent.includes(p), `${p} is in the build context`);
  assert.ok(!sent.some((p) => p === 'README.md' || p.includes('__pycache__') || /(^|\/)test_[^/]*\.py$/.test(p)), sent.join('\n'));
  const desktop = imageInfo(cache, 'desktop');
  assert.equal(desktop.tag, dockerfileTag(desktopRecipe, debian.tag, contextDigest(DESKTOP_CONTEXT)));
  const files = contextEntries(DESKTOP_CONTEXT).map((e) => e.path);
  for (const p of ['Dockerfile', 'shellbase-desktop.service', 'bin/Xvfb', 'bin/startxfce4', 'bin/xdg-open', 'bin/session', 'bin/ready', 'xfwm4.xml']) assert.ok(files.includes(p), `${p} is in the desktop build context`);
  // A machine of the desktop image gets more memory than the server's default when its create names none.
  assert.deepEqual([imageMachineDefaults('desktop'), imageMachineDefaults('debian'), imageMachineDefaults('nope')], [{ memoryMb: 2048, cpus: 2 }, {}, {}]);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseDockerignore } from '../../packages/protocol/src/dockerignore.ts';
import { parseDockerfile } from '../../packages/server/src/engine/builds/dockerfile.ts';
import { expand, keyValues, splitWords } from '../../packages/server/src/engine/builds/words.ts';

test('Dockerfiles: continuations join, comments and blank lines drop, each instruction keeps its first line', () => {
  const f = parseDockerfile([
    '# syntax=docker/dockerfile:1', 'ARG V=1', '', 'from debian AS Build', 'RUN apt-get update && \\', '    # a comment inside', '    echo done',
    'COPY --from=build --chown=app:app ["a b", "/dst/"]', 'CMD ["sh", "-c", "echo"]', 'FROM build', 'ENV A=1',
  ].join('\n'));
  assert.deepEqual(f.globalArgs.map((a) => [a.line, a.args]), [[2, 'V=1']]);
  assert.deepEqual(f.stages.map((s) => [s.index, s.name, s.from, s.fromLine]), [[0, 'build', 'debian', 4], [1, undefined, 'build', 10]]);
  const [run, copy, cmd] = f.stages[0].steps;
  assert.deepEqual([run.name, run.line, run.args], ['RUN', 5, 'apt-get update &&     echo done']);
  assert.deepEqual([copy.flags, copy.json], [{ from: 'build', chown: 'app:app' }, ['a b', '/dst/']]);
  assert.deepEqual(cmd.json, ['sh', '-c', 'echo']);
});

test('Dockerfiles: here-documents in RUN: a sole one is the script (a #! one a program), others follow the command for its shell', () => {
  const f = parseDockerfile([
    'FROM debian', 'RUN <<EOF', 'apt-get update', 'echo "$HOME"', 'EOF', 'RUN python3 - <<"PY" > /out', 'print(1)', 'PY',
    'RUN <<-EOT', '\techo tabbed', '\tEOT', 'RUN <<EOF', '#!/usr/bin/env python3', 'print(2)', 'EOF', 'ENV A=1',
  ].join('\n'));
  const [sole, cmd, tabs, shebang, env] = f.stages[0].steps;
  assert.deepEqual([sole.line, sole.args, sole.json], [2, 'apt-get update\necho "$HOME"', undefined]);
  assert.equal(sole.text, 'RUN <<EOF\napt-get update\necho "$HOME"\nEOF');
  assert.deepEqual([cmd.line, cmd.args], [6, 'python3 - <<"PY" > /out\nprint(1)\nPY']);
  assert.equal(tabs.args, 'echo tabbed');
  assert.match(shebang.args, /^f=\$\(mktemp\) && cat > "\$f" <<'SHELLBASE_HEREDOC_12'\n#!\/usr\/bin\/env python3\nprint\(2\)\nSHELLBASE_HEREDOC_12\nchmod \+x "\$f" && "\$f"/);
  assert.deepEqual([env.name, env.line], ['ENV', 16]);
});

test('Dockerfiles: what cannot be built is refused with its line', () => {
  const cases: [string, RegExp][] = [
    ['FROM a\nHEALTHCHECK CMD true', /line 2: HEALTHCHECK is not supported/],
    ['FROM a\nnope x', /line 2: unknown instruction "nope"/],
    ['FROM a\nCOPY --frm=x a b', /line 2: COPY has no flag --frm/],
    ['FROM a\nRUN --network=host true', /line 2: RUN --network is not supported/],
    ['FROM a AS x\nFROM b AS X', /line 2: stage name "x" is used twice/],
    ['ENV A=1\nFROM a', /line 1: ENV before the first FROM/],
    ['# escape=`\nFROM a', /line 1: the escape directive/],
    ['FROM a\nSHELL /bin/bash', /line 2: SHELL takes a JSON array/],
    ['FROM a\nWORKDIR', /line 2: WORKDIR needs arguments/],
    ['', /no FROM/],
    ['FROM a\nRUN <<EOF\necho never ends', /line 2: the here-document EOF has no end/],
    ['FROM a\nCOPY <<EOF /etc/x\nhello\nEOF', /line 2: COPY of a here-document is not supported/],
  ];
  for (const [text, re] of cases) assert.throws(() => parseDockerfile(text), (e: Error & { code?: string }) => re.test(e.message) && e.code === 'invalid_argument', text);
});

test('words: variables expand as Docker expands them; quotes and escapes of ENV values', () => {
  const vars = { A: 'x', EMPTY: '' };
  assert.equal(expand('$A ${A} ${B:-def} ${A:-def} ${A:+alt} ${B:+alt} ${EMPTY:-e} \\$A $ $1', vars, 1), 'x x def x alt  e $A $ $1');
  assert.throws(() => expand('${A', vars, 3), /line 3: a \$\{ without its \}/);
  assert.throws(() => expand('${A/x/y}', vars, 4), /line 4: bad substitution/);
  assert.deepEqual(splitWords(`a "b c" 'd $e' f\\ g ""`, 1), ['a', 'b c', 'd $e', 'f g', '']);
  assert.throws(() => splitWords('"open', 2), /line 2: unterminated " quote/);
  assert.deepEqual(keyValues('A=1 B="two words" C=$A', vars, 1, true), [['A', '1'], ['B', 'two words'], ['C', 'x']]);
  assert.deepEqual(keyValues('PATH /usr/bin:$A', vars, 1, true), [['PATH', '/usr/bin:x']]);
  assert.throws(() => keyValues('A=1 junk', vars, 5, false), /line 5: "junk" is not KEY=VALUE/);
});

test('.dockerignore: globs, ** across directories, ! re-includes, a directory covers what is below it', () => {
  const ig = parseDockerignore('# comment\n*.log\n**/tmp\nbuild\n!build/keep.txt\n/abs/x\n');
  const out = ['a.log', 'sub/a.log', 'x/y/tmp', 'tmp/z', 'build/out.o', 'abs/x', 'abs/x/y'].filter((p) => ig.ignores(p));
  assert.deepEqual(out, ['a.log', 'x/y/tmp', 'tmp/z', 'build/out.o', 'abs/x', 'abs/x/y']);
  assert.equal(ig.ignores('build/keep.txt'), false);
  assert.equal(ig.ignores('keep.log.txt'), false);
  assert.equal(ig.prunes('build'), false, 'a ! rule may bring something below back');
  assert.equal(parseDockerignore('node_modules\n').prunes('node_modules'), true);
});

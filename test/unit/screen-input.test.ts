import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inputCommand } from '../../packages/server/src/machines/screen.ts';
import { parseInput } from '../../packages/cli/src/commands/screen.ts';
import { UsageError, parseArgs } from '../../packages/cli/src/args.ts';
import { ShellbaseError } from '../../packages/server/src/errors.ts';

test('screen input: each input is one xdotool chain; typing gets its delays on top of the time limit', () => {
  assert.deepEqual(inputCommand({ type: 'move', x: 3, y: 4 }).argv, ['mousemove', '3', '4']);
  assert.deepEqual(inputCommand({ type: 'click', x: 10, y: 20, button: 'right' }).argv, ['mousemove', '10', '20', 'click', '--repeat', '1', '3']);
  assert.deepEqual(inputCommand({ type: 'click', count: 2 }).argv, ['click', '--repeat', '2', '1']);
  assert.deepEqual(inputCommand({ type: 'scroll', direction: 'down', amount: 3 }).argv, ['click', '--repeat', '3', '5']);
  assert.deepEqual(inputCommand({ type: 'scroll', x: 1, y: 2, direction: 'left' }).argv, ['mousemove', '1', '2', 'click', '--repeat', '1', '6']);
  // `--` ends type's options: text that starts with a dash is typed as it is.
  const typed = inputCommand({ type: 'type', text: '-rf now', delayMs: 100 });
  assert.deepEqual(typed.argv, ['type', '--delay', '100', '--', '-rf now']);
  assert.ok(typed.timeoutMs >= 100 * 7 + 15_000);
  assert.deepEqual(inputCommand({ type: 'key', key: 'ctrl+l' }).argv, ['key', 'ctrl+l']);
  assert.throws(() => inputCommand({ type: 'click', x: 5 }), (e: unknown) => e instanceof ShellbaseError && e.code === 'invalid_argument');
});

test('shellbase machine input: its words as one input; wrong words are a usage error', () => {
  const spec = { flags: { button: 'string', double: 'boolean' }, positionals: [2, 100], rest: 'optional' } as const;
  const parse = (...argv: string[]) => { const a = parseArgs(argv, spec); return parseInput(a.positionals.slice(1), a, 'usage'); };
  assert.deepEqual(parse('m1', 'click', '10', '20', '--button', 'right'), { type: 'click', x: 10, y: 20, button: 'right' });
  assert.deepEqual(parse('m1', 'click', '--double'), { type: 'click', button: 'left', count: 2 });
  assert.deepEqual(parse('m1', 'move', '1', '2'), { type: 'move', x: 1, y: 2 });
  assert.deepEqual(parse('m1', 'scroll', 'down', '4'), { type: 'scroll', direction: 'down', amount: 4 });
  assert.deepEqual(parse('m1', 'type', 'hello', 'world'), { type: 'type', text: 'hello world' });
  assert.deepEqual(parse('m1', 'key', 'ctrl+l'), { type: 'key', key: 'ctrl+l' });
  assert.deepEqual(parse('m1', 'type', '--', '-rf', 'now'), { type: 'type', text: '-rf now' });
  for (const bad of [['m1', 'click', '10'], ['m1', 'move', 'x', '1'], ['m1', 'scroll', 'sideways'], ['m1', 'key'], ['m1', 'dance'], ['m1', 'click', '--button', 'left-ish'], ['m1', 'scroll', 'down', '3', '4'], ['m1', 'key', 'a', '--', 'b']]) {
    assert.throws(() => parse(...bad), UsageError, bad.join(' '));
  }
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatDuration, parseDuration } from '../../packages/protocol/src/durations.ts';
import { UsageError, durationFlag, parseArgs } from '../../packages/cli/src/args.ts';

test('durations: units, compounds, decimals and bare milliseconds', () => {
  const cases: [string, number][] = [
    ['90s', 90_000], ['30m', 1_800_000], ['2h', 7_200_000], ['1500ms', 1500], ['1500', 1500], ['1', 1],
    ['1h30m', 5_400_000], ['2m30s', 150_000], ['1.5h', 5_400_000], ['0.5s', 500], ['1d', 86_400_000], [' 45s ', 45_000],
  ];
  for (const [text, ms] of cases) assert.equal(parseDuration(text), ms, text);
});

test('durations: anything else is refused with what is accepted', () => {
  for (const bad of ['', ' ', '10x', 'h', '1 h', '-5s', '-5', '1.5', '0', '0s', '1e3', '5m junk', '0.0001ms', 'NaN', '30M', '9'.repeat(30)]) {
    assert.throws(() => parseDuration(bad), (e: Error) => /write a duration such as 90s, 30m, 2h/.test(e.message), JSON.stringify(bad));
  }
});

test('durations: formatted in the largest units that fit, and read back', () => {
  const cases: [number, string][] = [
    [500, '500ms'], [1000, '1s'], [1500, '1.5s'], [60_000, '1m'], [90_500, '1m30.5s'], [600_000, '10m'],
    [3_600_000, '1h'], [5_400_000, '1h30m'], [86_400_000, '24h'], [3_600_001, '1h0.001s'],
  ];
  for (const [ms, text] of cases) {
    assert.equal(formatDuration(ms), text, String(ms));
    assert.equal(parseDuration(text), ms, text);
  }
});

test('durations: a CLI time flag takes a duration; a bad one is a usage error naming the flag and the usage', () => {
  const usage = 'shellbase exec CTX [--timeout DURATION] -- CMD...';
  const spec = { usage, flags: { timeout: 'string' as const }, positionals: [1, 1] as [number, number], rest: 'required' as const };
  assert.equal(durationFlag(parseArgs(['c', '--timeout', '30m', '--', 'true'], spec), 'timeout', usage), 1_800_000);
  assert.equal(durationFlag(parseArgs(['c', '--timeout=90000', '--', 'true'], spec), 'timeout', usage), 90_000);
  assert.equal(durationFlag(parseArgs(['c', '--', 'true'], spec), 'timeout', usage), undefined);
  assert.throws(() => durationFlag(parseArgs(['c', '--timeout', '5 minutes', '--', 'true'], spec), 'timeout', usage),
    (e: unknown) => e instanceof UsageError && e.message.startsWith('--timeout: "5 minutes"') && e.message.endsWith(`usage: ${usage}`));
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { overlappingPaths, unionChanges } from '../../packages/server/src/engine/overlap.ts';
import type { Change } from '../../packages/server/src/store/layers/types.ts';

test('overlap: the rules that decide rebase or conflict', () => {
  const cases: [string, Change[], Change[], string[]][] = [
    ['disjoint files in one directory', [['/root', 'd'], ['/root/a', 'f']], [['/root', 'd'], ['/root/b', 'f']], []],
    ['same file', [['/root/a', 'f']], [['/root/a', 'f']], ['/root/a']],
    ['file against whiteout', [['/etc/motd', 'f']], [['/etc/motd', 'w']], ['/etc/motd']],
    ['whiteout of a directory above a change', [['/srv/x/y', 'f']], [['/srv/x', 'w']], ['/srv/x/y']],
    ['our opaque directory over their change beneath', [['/srv', 'O']], [['/srv/a', 'f']], ['/srv']],
    ['our file replacing their directory tree', [['/srv', 'f']], [['/srv', 'd'], ['/srv/a', 'f']], ['/srv']],
    ['plain directories never conflict', [['/a', 'd']], [['/a', 'd']], []],
    ['sibling prefix is not a parent', [['/ab', 'f']], [['/a', 'w']], []],
    ['empty', [], [['/a', 'f']], []],
  ];
  for (const [name, ours, theirs, want] of cases) {
    assert.deepEqual(overlappingPaths(ours, theirs), want, name);
    // Overlap is symmetric in whether it exists.
    assert.equal(overlappingPaths(theirs, ours).length > 0, want.length > 0, `${name} (reversed)`);
  }
});

test('union keeps the strongest type of a path', () => {
  const u = new Map(unionChanges([[['/a', 'w']], [['/a', 'd'], ['/b', 'f']]]));
  assert.equal(u.get('/a'), 'w');
  assert.equal(u.get('/b'), 'f');
});

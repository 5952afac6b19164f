import assert from 'node:assert/strict';
import { test } from 'node:test';
import { placeQuery, rank, type Peer } from '../../packages/server/src/cluster/locality.ts';

const peers = (n: number, load = 0): Peer[] => Array.from({ length: n }, (_, i) => ({ id: `w${i}`, address: `http://10.0.0.${i}:7070`, load }));

test('locality: every worker ranks a key the same way, whatever order it lists the workers in', () => {
  const ws = peers(5);
  for (let k = 0; k < 50; k++) {
    const key = `t/ctx${k}`;
    assert.deepEqual(rank(key, [...ws].reverse()).map((w) => w.id), rank(key, ws).map((w) => w.id));
  }
});

test('locality: keys spread over the workers, and a worker leaving moves only the keys it held', () => {
  const ws = peers(4);
  const keys = Array.from({ length: 400 }, (_, k) => `t/ctx${k}`);
  const owner = new Map(keys.map((key) => [key, rank(key, ws)[0].id]));
  const counts = new Map<string, number>();
  for (const id of owner.values()) counts.set(id, (counts.get(id) ?? 0) + 1);
  assert.equal(counts.size, 4);
  for (const n of counts.values()) assert.ok(n > 50, `each worker prefers a fair share (${[...counts.values()]})`);
  const left = ws.filter((w) => w.id !== 'w2');
  for (const key of keys) {
    const now = rank(key, left)[0].id;
    if (owner.get(key) !== 'w2') assert.equal(now, owner.get(key), 'a key whose worker stayed keeps it');
    else assert.equal(now, rank(key, ws)[1].id, 'a key whose worker left goes to its second choice');
  }
});

test('locality: a query goes to its preferred worker unless that is this one or it is overloaded (then it spills here)', () => {
  const ws = peers(3);
  const key = 't/ctx';
  const [first, second] = rank(key, ws);
  assert.equal(placeQuery(key, second.id, ws, 16)?.id, first.id);
  assert.equal(placeQuery(key, first.id, ws, 16), null, 'the preferred worker runs it itself');
  const busy = ws.map((w) => (w.id === first.id ? { ...w, load: 16 } : w));
  assert.equal(placeQuery(key, second.id, busy, 16), null, 'an overloaded preferred worker: run here');
  assert.equal(placeQuery(key, second.id, [], 16), null, 'nothing known of the others: run here');
});

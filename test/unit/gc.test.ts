import assert from 'node:assert/strict';
import { test } from 'node:test';
import { garbage, type GraphVersion, type Retention } from '../../packages/server/src/engine/gc.ts';

const day = (n: number) => new Date(Date.UTC(2026, 0, 1 + n)).toISOString();
const v = (id: string, parent: string | null, created: number, extra: Partial<GraphVersion> = {}): GraphVersion =>
  ({ id, tenantId: 't', parent, merged: null, context: 'c', createdAt: day(created), ...extra });

/** A chain a1..a10 (one a day), head a10; b forks at a3 and has b1, b2. */
const chain = (): GraphVersion[] => {
  const out: GraphVersion[] = [];
  for (let i = 1; i <= 10; i++) out.push(v(`a${i}`, i === 1 ? null : `a${i - 1}`, i));
  out.push(v('b1', 'a3', 11, { context: 'b' }), v('b2', 'b1', 12, { context: 'b' }));
  return out;
};
const keepAll: Retention = { cutoff: day(0), keepVersions: 1 };
const sorted = (ids: string[]) => [...ids].sort();

test('gc: nothing goes while everything is within retention', () => {
  assert.deepEqual(garbage(chain(), ['a10', 'b2'], new Set(), () => keepAll), []);
});

test('gc: the last N versions of each head stay, older ones past retention go', () => {
  const r: Retention = { cutoff: day(100), keepVersions: 3 };
  assert.deepEqual(sorted(garbage(chain(), ['a10', 'b2'], new Set(), () => r)), sorted(['a1', 'a2', 'a4', 'a5', 'a6', 'a7']));
  // By date: everything from day 6 on stays, and the fork's last three (b2, b1, a3).
  const byDate: Retention = { cutoff: day(6), keepVersions: 3 };
  assert.deepEqual(sorted(garbage(chain(), ['a10', 'b2'], new Set(), () => byDate)), sorted(['a1', 'a2', 'a4', 'a5']));
});

test("gc: a deleted fork's versions go at once; conflicts stay while owned and recent", () => {
  const graph = [...chain(), v('x', 'a8', 20), v('y', 'a8', 20, { context: null })];
  const r: Retention = { cutoff: day(15), keepVersions: 1 };
  // b was deleted (b2 is no head, its versions are disowned); x is a conflict still owned by c.
  const g = garbage(graph.map((x) => (x.context === 'b' ? { ...x, context: null } : x)), ['a10'], new Set(), () => r);
  assert.ok(!g.includes('x') && !g.includes('a10'));
  assert.ok(g.includes('b1') && g.includes('b2') && g.includes('y') && g.includes('a8'));
});

test('gc: merge parents are links like any other; a pinned version stays', () => {
  const graph = [...chain(), v('m', 'a10', 13, { merged: 'b2' })];
  const r: Retention = { cutoff: day(100), keepVersions: 2 };
  const g = garbage(graph, ['m'], new Set(['b1']), () => r);
  // m and its parents a10 and b2 stay, and pinned b1 (alone: what is below a pin may go).
  assert.deepEqual(sorted(g), sorted(['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8', 'a9']));
});

test('gc: each tenant has its own retention', () => {
  const graph = [v('p1', null, 1, { tenantId: 'p' }), v('p2', 'p1', 2, { tenantId: 'p' }), v('q1', null, 1, { tenantId: 'q' }), v('q2', 'q1', 2, { tenantId: 'q' })];
  const g = garbage(graph, ['p2', 'q2'], new Set(), (t) => (t === 'p' ? { cutoff: day(100), keepVersions: 1 } : keepAll));
  assert.deepEqual(g, ['p1']);
});

test('gc: a pinned old version keeps the path up to the heads that reach it (a rebase walks it)', () => {
  const r: Retention = { cutoff: day(100), keepVersions: 2 };
  const g = garbage(chain(), ['a10', 'b2'], new Set(['a4']), () => r);
  assert.deepEqual(sorted(g), sorted(['a1', 'a2', 'a3']), 'a5–a9 lead from the pin to a10; b1 and b2 are the fork\'s');
});

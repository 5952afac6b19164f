import assert from 'node:assert/strict';
import { test } from 'node:test';
import { check, violations, type Reader } from '../chaos/checker.ts';
import type { Op } from '../chaos/workload.ts';

// The chaos run's checker over made-up histories and final states: each kind of violation it
// exists to find is found, and a clean history passes.

/** A final state: each context's versions (newest first) and files at its head, or at a version (`path@version`). */
type Versions = [string, string | null, number?][];

/** A final state: each context's versions (newest first: id, parent, and a service run's lease epoch) and files at its head, or at a version (`path@version`). */
function state(contexts: Record<string, { versions: Versions; files: Record<string, string> }>, forks: Record<string, string> = {}): Reader {
  return async (route) => {
    const url = new URL(route, 'http://x');
    const [, , , name, what, ...rest] = url.pathname.split('/');
    if (!what) return forks[name] ? { status: 200, text: '', body: { head: forks[name] } } : { status: 404, text: '', body: null };
    const c = contexts[name];
    if (!c) return { status: 404, text: '', body: null };
    if (what === 'versions') {
      const versions = c.versions.map(([id, parent, epoch]) => ({ id, parent, cause: epoch === undefined ? { kind: 'exec' } : { kind: 'service', lease: { worker: 'w1', epoch } } }));
      return { status: 200, text: '', body: { versions } };
    }
    const file = `/${rest.join('/')}`;
    const at = url.searchParams.get('version');
    const text = c.files[at ? `${file}@${at}` : file];
    if (text === undefined && file === '/root/runs') {
      const names = Object.keys(c.files).filter((f) => f.startsWith('/root/runs/')).map((f) => ({ name: f.slice('/root/runs/'.length) }));
      return names.length ? { status: 200, text: '', body: { entries: names } } : { status: 404, text: '', body: null };
    }
    return text === undefined ? { status: 404, text: '', body: null } : { status: 200, text, body: null };
  };
}

let id = 0;
const op = (o: Partial<Op>): Op => ({ id: ++id, kind: 'write', worker: 'w1', context: 'c0', start: 1, end: 2, outcome: 'ok', ...o });
const chain: Versions = [['v3', 'v2'], ['v2', 'v1'], ['v1', null]];

test('chaos checker: a history the final state agrees with has no violations', async () => {
  const history = [
    op({ path: '/root/u/1', value: 'a', version: 'v2' }),
    op({ kind: 'put', path: '/root/p/2', value: 'b', version: 'v3' }),
    op({ kind: 'shared', path: '/root/shared', value: 's', version: 'v3' }),
    op({ path: '/root/u/9', value: 'z', outcome: 'unreachable' }),
    op({ kind: 'read', path: '/root/u/1', value: 'a', read: 'a' }),
    op({ kind: 'fork', fork: 'f1', version: 'v2' }),
    op({ kind: 'quota', context: 'quota', ran: [1n, 5n] }), op({ kind: 'quota', context: 'quota', ran: [2n, 6n] }), op({ kind: 'quota', context: 'quota', ran: [6n, 9n] }),
  ];
  const svc = { versions: [['s4', 's3', 7], ['s3', 's2', 7], ['s2', 's1', 3], ['s1', null]] as Versions, files: { '/root/runs/r1': '10\n20\n30\n', '/root/runs/r2': '31\n40\n' } };
  const v = await check(history, state({ c0: { versions: chain, files: { '/root/u/1': 'a', '/root/p/2': 'b', '/root/shared@v3': 's' } }, svc }, { f1: 'v2' }), ['c0'], 2);
  assert.equal(violations(v), 0, JSON.stringify(v));
  assert.equal(v.outcomes['write ok'], 1);
  assert.equal(v.outcomes['write unreachable'], 1);
});

test('chaos checker: lost writes, wrong bytes, broken chains, moved forks, double runs, stale leases, quota overruns, hangs and 500s are each found', async () => {
  const files = { '/root/u/1': 'a', '/root/u/3': 'not what was written', '/root/shared@v3': 'other' };
  const history = [
    op({ path: '/root/u/1', value: 'a', version: 'v9' }), // its version is not in the history
    op({ path: '/root/u/2', value: 'b', version: 'v2' }), // its file is not in the head
    op({ path: '/root/u/3', value: 'c', outcome: 'hung' }), // unacknowledged, yet bytes nobody wrote
    op({ kind: 'shared', path: '/root/shared', value: 's', version: 'v3' }),
    op({ kind: 'read', path: '/root/u/1', value: 'a', read: 'stale' }),
    op({ kind: 'fork', fork: 'f1', version: 'v1' }),
    op({ kind: 'merge', outcome: 'error', code: 'internal' }),
    op({ kind: 'quota', context: 'quota', ran: [1n, 5n] }), op({ kind: 'quota', context: 'quota', ran: [2n, 6n] }), op({ kind: 'quota', context: 'quota', ran: [3n, 4n] }),
  ];
  const broken: Versions = [['v3', 'v2'], ['v2', 'v0'], ['v1', null]];
  const svc = { versions: [['s3', 's2', 5], ['s2', 's1', 9], ['s1', null, 5]] as Versions, files: { '/root/runs/r1': '10\n20\n30\n', '/root/runs/r2': '25\n40\n' } };
  const v = await check(history, state({ c0: { versions: broken, files }, svc }, { f1: 'v2' }), ['c0'], 2);
  assert.equal(v.lost.length, 2, JSON.stringify(v.lost));
  assert.match(v.lost.join('\n'), /v9/);
  assert.match(v.lost.join('\n'), /\/root\/u\/2/);
  assert.equal(v.wrong.length, 3, JSON.stringify(v.wrong));
  assert.equal(v.chains.length, 1);
  assert.equal(v.forks.length, 1);
  assert.equal(v.quota.length, 1);
  assert.deepEqual(v.double, ['service runs r1 and r2 overlap by 0 ms']);
  assert.deepEqual(v.stale, ['s3 was committed under epoch 5 (w1) after s2 under epoch 9']);
  assert.equal(v.hung.length, 1);
  assert.equal(v.untyped.length, 1);
});

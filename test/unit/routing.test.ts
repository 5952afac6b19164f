import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Caller } from '../../packages/server/src/core/deps.ts';
import { placeOf } from '../../packages/server/src/ops/dispatch.ts';
import { OPERATIONS, type OperationKind } from '../../packages/server/src/ops/operations.ts';
import { ClusterRouter, HereRouter, type Place, type Router } from '../../packages/server/src/ops/routing.ts';
import type { PortTarget } from '../../packages/server/src/util/pipe.ts';

const caller = { tenantId: 't_1', isAdmin: false, hold: { release() {} } } as unknown as Caller;
const port = (elsewhere: { api: string; gateway: string } | null): PortTarget => ({
  name: 'service web', owner: { tenantId: 't_1', requireKey: false },
  acquire: () => Promise.reject(new Error('not used')), pipe: () => Promise.reject(new Error('not used')),
  elsewhere: async () => elsewhere,
});
const PLACES: Place[] = [
  { context: 'ctx' }, { machine: 'm_abc' }, { service: { context: 'ctx', name: 'web' } },
  { port: port(null), door: 'api' }, { port: port(null), door: 'gateway' },
];

/** What every router promises, run against each (nothing held elsewhere). */
function routerSuite(name: string, make: () => Router): void {
  describe(`Router: ${name}`, () => {
    test('what no other worker holds is served here', async () => {
      const r = make();
      for (const place of PLACES) assert.equal(await r.where(place, caller, false), null, JSON.stringify(place));
    });
    test('a request another worker passed here is served here', async () => {
      const r = make();
      for (const place of PLACES) assert.equal(await r.where(place, caller, true), null);
    });
    test('an unreachable worker is told without error', () => { make().unreachable('http://127.0.0.1:1'); });
  });
}

const nowhere = () => new ClusterRouter({ machineOwner: async () => null, serviceOwner: async () => null });
routerSuite('HereRouter', () => new HereRouter());
routerSuite('ClusterRouter', nowhere);

describe('ClusterRouter', () => {
  const unreachable: string[] = [];
  const router = new ClusterRouter({
    locality: { route: (tenant, context) => (tenant === 't_1' && context === 'far' ? 'http://b' : null), unreachable: (a) => unreachable.push(a) },
    machineOwner: async (id) => (id === 'm_far' ? 'http://c' : null),
    serviceOwner: async (c, context, name) => (c.tenantId === 't_1' && context === 'ctx' && name === 'far' ? 'http://d' : null),
  });

  test('an operation goes to the worker holding what it acts on', async () => {
    assert.equal(await router.where({ context: 'far' }, caller, false), 'http://b');
    assert.equal(await router.where({ machine: 'm_far' }, caller, false), 'http://c');
    assert.equal(await router.where({ machine: 'm_far' }, null, false), 'http://c');
    assert.equal(await router.where({ service: { context: 'ctx', name: 'far' } }, caller, false), 'http://d');
    assert.equal(await router.where({ port: port({ api: 'http://e', gateway: 'http://e:2' }), door: 'gateway' }, null, false), 'http://e:2');
    assert.equal(await router.where({ port: port({ api: 'http://e', gateway: 'http://e:2' }), door: 'api' }, caller, false), 'http://e');
  });

  test('what is held elsewhere is served here when it was passed here', async () => {
    assert.equal(await router.where({ context: 'far' }, caller, true), null);
    assert.equal(await router.where({ machine: 'm_far' }, caller, true), null);
  });

  test('a name that is no machine id is no machine elsewhere; without a caller no context or service is', async () => {
    assert.equal(await router.where({ machine: '../m_far' }, caller, false), null);
    assert.equal(await router.where({ context: 'far' }, null, false), null);
    assert.equal(await router.where({ service: { context: 'ctx', name: 'far' } }, null, false), null);
  });

  test('an unreachable worker is told to locality', () => {
    router.unreachable('http://b');
    assert.deepEqual(unreachable, ['http://b']);
  });
});

describe('operations', () => {
  test('queries, machine calls and a service\'s stop, removal and logs have places; the rest run where they land', () => {
    const placed = (Object.keys(OPERATIONS) as OperationKind[]).filter((k) => placeOf(k, { context: 'c', id: 'm_x', service: 's' }) !== null);
    assert.ok(placed.includes('context.exec'));
    assert.ok(placed.includes('service.stop') && placed.includes('service.remove') && placed.includes('service.logs'));
    assert.ok(placed.filter((k) => k.startsWith('machine.')).length >= 15);
    for (const k of ['context.create', 'context.get', 'file.read', 'machine.create', 'machine.list', 'snapshot.restore', 'tenant.create'] as const) assert.ok(!placed.includes(k), k);
    assert.deepEqual(placeOf('context.exec', { context: 'c' }), { context: 'c' });
    assert.deepEqual(placeOf('machine.exec', { id: 'm_x' }), { machine: 'm_x' });
    assert.deepEqual(placeOf('service.logs', { context: 'c', service: 's' }), { service: { context: 'c', name: 's' } });
  });
});

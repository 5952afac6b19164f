import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { MetadataStore, NewVersion } from '../../packages/server/src/store/metadata/types.ts';

const now = () => new Date().toISOString();
const version = (id: string, parent: NewVersion | null, layers: string[], changes: NewVersion['changes'] = []): NewVersion => ({
  id, tenantId: 't1', parent: parent?.id ?? null, depth: parent ? parent.depth + 1 : 0, layers, changes,
  cause: { kind: parent ? 'exec' : 'image' }, bytes: 0, createdAt: now(),
});

/** The cases every MetadataStore dialect must pass. */
export function metadataStoreConformance(name: string, make: () => Promise<{ md: MetadataStore; done: () => Promise<void> }>) {
  const setup = async () => {
    const { md, done } = await make();
    await md.createTenant({ id: 't1', name: 'one', admin: false, createdAt: now() });
    const root = version('v0', null, ['image:x:1'], null);
    await md.ensureImageVersion(root, { id: 'image:x:1', kind: 'image', bytes: 0, createdAt: now() });
    await md.createContext({ tenantId: 't1', name: 'c', head: 'v0', image: 'x', createdAt: now(), updatedAt: now() });
    return { md, done, root };
  };

  test(`${name}: heads move only by compare-and-set, all or nothing`, async () => {
    const { md, done, root } = await setup();
    try {
      const a = version('va', root, ['image:x:1', 'la'], [['/a', 'f']]);
      assert.equal(await md.commitVersion({ version: a, layer: { id: 'la', kind: 'exec', bytes: 1, createdAt: now() }, moveHead: { tenantId: 't1', context: 'c', expectedHead: 'v0' } }), true);
      const b = version('vb', root, ['image:x:1', 'lb'], [['/b', 'f']]);
      assert.equal(await md.commitVersion({ version: b, layer: { id: 'lb', kind: 'exec', bytes: 1, createdAt: now() }, moveHead: { tenantId: 't1', context: 'c', expectedHead: 'v0' } }), false);
      assert.equal((await md.getContext('t1', 'c'))!.head, 'va');
      assert.equal(await md.getVersion('vb'), null, 'the losing version was rolled back');
      assert.equal((await md.layerIds()).has('lb'), false, 'and its layer row');
      assert.equal(await md.commitVersion({ version: b }), true, 'unattached versions need no head');
      assert.deepEqual(await md.versionChanges('va'), [['/a', 'f']]);
      assert.equal(await md.versionChanges('v0'), null);
    } finally { await done(); }
  });

  test(`${name}: contexts are unique per tenant; lineage is newest first`, async () => {
    const { md, done, root } = await setup();
    try {
      assert.equal(await md.createContext({ tenantId: 't1', name: 'c', head: 'v0', image: 'x', createdAt: now(), updatedAt: now() }), false);
      let prev = root;
      for (let i = 1; i <= 5; i++) {
        const v = version(`v${i}`, prev, [...prev.layers, `l${i}`]);
        assert.ok(await md.commitVersion({ version: v, moveHead: { tenantId: 't1', context: 'c', expectedHead: prev.id } }));
        prev = v;
      }
      assert.deepEqual((await md.lineage('v5', 100)).map((v) => v.id), ['v5', 'v4', 'v3', 'v2', 'v1', 'v0']);
      assert.deepEqual((await md.lineage('v5', 2)).map((v) => v.id), ['v5', 'v4']);
      assert.equal(await md.deleteContext('t1', 'c'), true);
      assert.equal(await md.getContext('t1', 'c'), null);
      assert.ok(await md.getVersion('v5'), 'versions outlive their context');
    } finally { await done(); }
  });

  test(`${name}: dropping versions cuts links, spares heads and frees exactly the unreferenced layers`, async () => {
    const { md, done, root } = await setup();
    try {
      const layer = (id: string, bytes: number) => ({ id, kind: 'exec' as const, bytes, createdAt: now() });
      const a = { ...version('a', root, ['image:x:1', 'la']), context: 'c' };
      const b = { ...version('b', a, ['image:x:1', 'la', 'lb']), context: 'c' };
      const c = { ...version('cc', b, ['image:x:1', 'la', 'lb', 'lc']), context: 'c' };
      let head = root.id;
      for (const [v, bytes] of [[a, 10], [b, 20], [c, 30]] as const) {
        assert.ok(await md.commitVersion({ version: v, layer: layer(v.layers.at(-1)!, bytes), moveHead: { tenantId: 't1', context: 'c', expectedHead: head } }));
        head = v.id;
      }
      const u = { ...version('u', a, ['image:x:1', 'la', 'lu']), context: 'c' };
      assert.ok(await md.commitVersion({ version: u, layer: layer('lu', 40) }));
      const m = { ...version('m', c, ['image:x:1', 'la', 'lb', 'lc', 'lu']), merged: 'u', context: 'c' };
      assert.ok(await md.commitVersion({ version: m, moveHead: { tenantId: 't1', context: 'c', expectedHead: 'cc' } }));
      assert.equal(await md.totalLayerBytes(), 100);

      const g = await md.versionGraph();
      assert.deepEqual(g.heads, ['m']);
      assert.deepEqual(g.versions.map((v) => v.id).sort(), ['a', 'b', 'cc', 'm', 'u'], 'image roots are not in the graph');
      assert.deepEqual(g.versions.find((v) => v.id === 'm'), { id: 'm', tenantId: 't1', parent: 'cc', merged: 'u', context: 'c', createdAt: m.createdAt });

      // Every layer is still referenced by the head: rows go, layers stay; links to dropped versions are cut.
      const r1 = await md.dropVersions(['a', 'u', 'm'], new Set());
      assert.equal(r1.versions, 2, 'the head m is spared');
      assert.deepEqual(r1.layers, []);
      assert.equal((await md.getVersion('b'))!.parent, null, 'history now starts at b');
      assert.equal((await md.getVersion('m'))!.merged, null);
      assert.deepEqual((await md.lineage('m', 10)).map((v) => v.id), ['m', 'cc', 'b']);

      // A layer no version refers to goes, unless kept; its bytes are reported.
      await md.commitVersion({ version: { ...version('w', root, ['image:x:1', 'lw']), context: 'c' }, layer: layer('lw', 7) });
      const r2 = await md.dropVersions(['w'], new Set(['lw']));
      assert.equal(r2.versions, 1);
      assert.deepEqual(r2.layers, [], 'a kept layer keeps its row');
      const r3 = await md.dropVersions([], new Set());
      assert.deepEqual(r3.layers.map((l) => [l.id, l.bytes]), [['lw', 7]]);
      assert.equal((await md.layerIds()).has('lw'), false);

      // Deleting a context disowns its versions.
      assert.ok(await md.deleteContext('t1', 'c'));
      assert.equal((await md.getVersion('m'))!.context, null);
      assert.deepEqual((await md.versionGraph()).heads, []);
    } finally { await done(); }
  });

  test(`${name}: services are unique per context, found by token, and go with their context`, async () => {
    const { md, done } = await setup();
    try {
      const spec = { format: 1 as const, command: 'python3 -m http.server', port: 8000, env: {}, idleTimeoutMs: 1000, startTimeoutMs: 30000, limits: {} };
      const row = { tenantId: 't1', context: 'c', name: 'web', token: 'tok1', spec, createdAt: now() };
      assert.equal(await md.createService(row), true);
      assert.equal(await md.createService({ ...row, token: 'tok2' }), false, 'one name per context');
      assert.deepEqual(await md.getService('t1', 'c', 'web'), row);
      assert.deepEqual(await md.serviceByToken('tok1'), row);
      assert.equal(await md.serviceByToken('tok2'), null);
      assert.ok(await md.createService({ ...row, name: 'db', token: 'tok3' }));
      assert.deepEqual((await md.listServices('t1', 'c')).map((s) => s.name), ['db', 'web']);
      assert.equal(await md.deleteService('t1', 'c', 'db'), true);
      assert.equal(await md.deleteService('t1', 'c', 'db'), false);
      assert.ok(await md.deleteContext('t1', 'c'));
      assert.equal(await md.serviceByToken('tok1'), null, 'deleting a context deletes its services');
    } finally { await done(); }
  });

  test(`${name}: machines belong to their tenant, port tokens follow their spec, snapshots outlive their machine`, async () => {
    const { md, done } = await setup();
    try {
      const shape = { format: 1 as const, image: 'debian', memoryMb: 512, cpus: 1, idleTimeoutMs: 1000 };
      const row = { id: 'm_1', tenantId: 't1', state: 'starting' as const, createdAt: now(), spec: { ...shape, disk: ['/d/1.qcow2'], ports: [{ port: 80, token: 'p1' }] } };
      await md.createMachine(row);
      assert.deepEqual(await md.getMachine('t1', 'm_1'), row);
      assert.equal(await md.getMachine('t2', 'm_1'), null, 'another tenant sees nothing');
      assert.deepEqual((await md.machineByPortToken('p1'))?.port, 80);
      const moved = { ...row, state: 'running' as const, spec: { ...row.spec, ports: [{ port: 8080, token: 'p2' }] } };
      await md.updateMachine(moved);
      assert.equal(await md.machineByPortToken('p1'), null, 'a token the spec no longer names is gone');
      assert.deepEqual(await md.machineByPortToken('p2'), { machine: moved, port: 8080 });
      await md.createMachine({ ...row, id: 'm_2', tenantId: 't2', spec: { ...row.spec, ports: [] } });
      assert.deepEqual((await md.listMachines('t1')).map((m) => m.id), ['m_1']);
      assert.deepEqual((await md.listMachines()).map((m) => m.id).sort(), ['m_1', 'm_2']);
      const snap = { id: 's_1', tenantId: 't1', machineId: 'm_1', createdAt: now(),
        spec: { ...shape, disk: ['/d/0.qcow2'], ram: '/s/ram', state: '/s/state.bin', qemu: 'QEMU 7.2', machineType: 'microvm', accel: 'tcg', ports: [8080] } };
      await md.createSnapshot(snap);
      assert.equal(await md.deleteMachine('t2', 'm_1'), false, 'only by its tenant');
      assert.equal(await md.deleteMachine('t1', 'm_1'), true);
      assert.equal(await md.machineByPortToken('p2'), null);
      assert.deepEqual(await md.getSnapshot('t1', 's_1'), snap);
      assert.equal(await md.getSnapshot('t2', 's_1'), null);
      assert.deepEqual((await md.listSnapshots('t1')).map((s) => s.id), ['s_1']);
      assert.equal(await md.deleteSnapshot('t1', 's_1'), true);
      assert.equal(await md.deleteSnapshot('t1', 's_1'), false);
    } finally { await done(); }
  });

  test(`${name}: a layer prefix is replaced exactly, never a longer id that starts alike`, async () => {
    const { md, done, root } = await setup();
    try {
      const a = version('pa', root, ['image:x:1', 'l1', 'l2', 'l3']);
      const b = version('pb', root, ['image:x:1', 'l1', 'l2x']);
      const c = version('pc', root, ['image:x:1', 'l1', 'l2']);
      for (const v of [a, b, c]) await md.commitVersion({ version: v });
      const n = await md.replaceLayerPrefix(['image:x:1', 'l1', 'l2'], ['image:x:1', 'sq'], { id: 'sq', kind: 'squash', bytes: 0, createdAt: now() });
      assert.equal(n, 2);
      assert.deepEqual((await md.getVersion('pa'))!.layers, ['image:x:1', 'sq', 'l3']);
      assert.deepEqual((await md.getVersion('pb'))!.layers, ['image:x:1', 'l1', 'l2x']);
      assert.deepEqual((await md.getVersion('pc'))!.layers, ['image:x:1', 'sq']);
      assert.ok((await md.layerIds()).has('sq'));
    } finally { await done(); }
  });

  test(`${name}: keys map to tenants by hash`, async () => {
    const { md, done } = await setup();
    try {
      await md.addApiKey('t1', 'hash-1');
      assert.equal((await md.tenantForKey('hash-1'))!.id, 't1');
      assert.equal(await md.tenantForKey('hash-2'), null);
      assert.equal(await md.adminTenant(), null);
    } finally { await done(); }
  });
}

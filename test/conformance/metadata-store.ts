import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { LayerRow, MetadataStore, NewVersion } from '../../packages/server/src/store/metadata/types.ts';

const now = () => new Date().toISOString();
const at = (day: number) => new Date(Date.UTC(2026, 0, 1 + day)).toISOString();
const version = (id: string, parent: NewVersion | null, layers: string[], changes: NewVersion['changes'] = [], extra: Partial<NewVersion> = {}): NewVersion => ({
  id, tenantId: 't1', parent: parent?.id ?? null, depth: parent ? parent.depth + 1 : 0, layers, changes,
  cause: { kind: parent ? 'exec' : 'image' }, bytes: 0, createdAt: now(), ...extra,
});
const layer = (id: string, bytes: number, kind: LayerRow['kind'] = 'exec'): LayerRow => ({ id, kind, bytes, createdAt: now() });

/** The cases every MetadataStore dialect must pass; together they call every method of every repository. */
export function metadataStoreConformance(name: string, make: () => Promise<{ md: MetadataStore; done: () => Promise<void> }>) {
  const setup = async () => {
    const { md, done } = await make();
    await md.tenants.create({ id: 't1', name: 'one', admin: false, createdAt: now() });
    const root = version('v0', null, ['image:x:1'], null, { tenantId: '' });
    await md.versions.ensureImage(root, layer('image:x:1', 0, 'image'));
    await md.versions.ensureImage(root, layer('image:x:1', 0, 'image'));
    await md.contexts.create({ tenantId: 't1', name: 'c', head: 'v0', image: 'x', createdAt: now(), updatedAt: now() });
    return { md, done, root };
  };
  const withStore = (title: string, fn: (s: Awaited<ReturnType<typeof setup>>) => Promise<void>) => test(`${name}: ${title}`, async () => {
    const s = await setup();
    try { await fn(s); } finally { await s.done(); }
  });

  withStore('heads move only by compare-and-set, all or nothing', async ({ md, root }) => {
    const a = version('va', root, ['image:x:1', 'la'], [['/a', 'f']]);
    assert.equal(await md.versions.commit({ version: a, layer: layer('la', 1), moveHead: { tenantId: 't1', context: 'c', expectedHead: 'v0' } }), true);
    const b = version('vb', root, ['image:x:1', 'lb'], [['/b', 'f']]);
    assert.equal(await md.versions.commit({ version: b, layer: layer('lb', 1), moveHead: { tenantId: 't1', context: 'c', expectedHead: 'v0' } }), false);
    assert.equal((await md.contexts.get('t1', 'c'))!.head, 'va');
    assert.equal(await md.versions.get('vb'), null, 'the losing version was rolled back');
    assert.deepEqual(await md.versions.knownLayers(['la', 'lb', 'image:x:1']), new Set(['la', 'image:x:1']), 'and its layer row');
    assert.equal(await md.tenants.storedBytes('t1'), 1, 'and its bytes');
    assert.equal(await md.versions.commit({ version: b }), true, 'unattached versions need no head');
    assert.deepEqual(await md.versions.changes('va'), [['/a', 'f']]);
    assert.equal(await md.versions.changes('v0'), null);
    assert.deepEqual(await md.versions.imageLayers(), ['image:x:1']);
    assert.deepEqual((await md.versions.layers()).map((l) => [l.id, l.kind, l.bytes]), [['image:x:1', 'image', 0], ['la', 'exec', 1]], 'every layer row, by id');
    assert.equal(await md.versions.layerBytes(['la', 'la', 'image:x:1', 'nope']), 1);
  });

  withStore('a context\'s state is its row, its head and its services, read together', async ({ md, root }) => {
    const empty = await md.contexts.state('t1', 'c');
    assert.deepEqual(empty, { context: await md.contexts.get('t1', 'c'), head: await md.versions.get('v0'), services: [] });
    assert.equal(await md.contexts.state('t1', 'missing'), null);
    const a = { ...version('va', root, ['image:x:1', 'la']), context: 'c' };
    assert.ok(await md.versions.commit({ version: a, layer: layer('la', 1), moveHead: { tenantId: 't1', context: 'c', expectedHead: 'v0' } }));
    const spec = { format: 2 as const, command: ['sleep', 'inf'], port: 80, env: {}, idleTimeoutMs: 1000, startTimeoutMs: 30000, limits: {}, access: 'key' as const };
    const web = { tenantId: 't1', context: 'c', name: 'web', token: 'tw', spec, createdAt: now() };
    const api = { ...web, name: 'api', token: 'ta', spec: { ...spec, share: 'tenant' as const } };
    assert.ok(await md.services.create(web));
    assert.ok(await md.services.create(api));
    const state = await md.contexts.state('t1', 'c');
    assert.equal(state?.context.head, 'va');
    assert.deepEqual(state?.head, await md.versions.get('va'));
    assert.deepEqual(state?.services, await md.services.list('t1', 'c'), 'by name, as list gives them');
  });

  withStore('a context\'s head alone is its head version, and follows the head as it moves', async ({ md, root }) => {
    assert.deepEqual(await md.contexts.head('t1', 'c'), await md.versions.get('v0'));
    assert.equal(await md.contexts.head('t1', 'missing'), null);
    assert.equal(await md.contexts.head('t2', 'c'), null, 'another tenant\'s context of the name');
    const a = { ...version('va', root, ['image:x:1', 'la']), context: 'c' };
    assert.ok(await md.versions.commit({ version: a, layer: layer('la', 1), moveHead: { tenantId: 't1', context: 'c', expectedHead: 'v0' } }));
    const head = await md.contexts.head('t1', 'c');
    assert.equal(head?.id, 'va');
    assert.deepEqual(head, (await md.contexts.state('t1', 'c'))?.head, 'the head state() reads');
  });

  withStore('a commit that requires its layers refuses one whose older layers are gone, changing nothing', async ({ md, root }) => {
    const a = { ...version('va', root, ['image:x:1', 'gone', 'la']), context: 'c' };
    const move = { tenantId: 't1', context: 'c', expectedHead: 'v0' };
    assert.equal(await md.versions.commit({ version: a, layer: layer('la', 1), moveHead: move, requireLayers: true }), false);
    assert.equal(await md.versions.get('va'), null);
    assert.deepEqual(await md.versions.knownLayers(['la']), new Set(), 'its new layer was not recorded');
    assert.equal((await md.contexts.get('t1', 'c'))!.head, 'v0');
    const b = { ...version('vb', root, ['image:x:1', 'lb']), context: 'c' };
    assert.equal(await md.versions.commit({ version: b, layer: layer('lb', 5), moveHead: move, requireLayers: true }), true, 'the new layer itself needs no row yet');
    assert.equal(await md.tenants.storedBytes('t1'), 5);
    const c = { ...version('vc', b, ['image:x:1', 'lb', 'lc']), context: 'c' };
    assert.equal(await md.versions.commit({ version: c, layer: layer('lc', 1), moveHead: move, requireLayers: true }), false, 'a moved head still loses');
  });

  withStore('commits to several contexts land together or not at all', async ({ md, root }) => {
    await md.contexts.create({ tenantId: 't1', name: 'vol', head: 'v0', image: 'x', createdAt: now(), updatedAt: now() });
    const onC = { ...version('va', root, ['image:x:1', 'la']), context: 'c' };
    const onVol = { ...version('vv', root, ['image:x:1', 'lv']), context: 'vol' };
    const both = (expected: string) => [
      { version: onC, layer: layer('la', 1), moveHead: { tenantId: 't1', context: 'c', expectedHead: 'v0' } },
      { version: onVol, layer: layer('lv', 2), moveHead: { tenantId: 't1', context: 'vol', expectedHead: expected } },
    ];
    assert.equal(await md.versions.commitAll(both('elsewhere')), false, 'one moved head refuses both');
    assert.equal((await md.contexts.get('t1', 'c'))!.head, 'v0', 'the first commit was rolled back');
    assert.equal(await md.versions.get('va'), null);
    assert.deepEqual(await md.versions.knownLayers(['la', 'lv']), new Set());
    assert.equal(await md.tenants.storedBytes('t1'), 0);
    assert.equal(await md.versions.commitAll(both('v0')), true);
    assert.equal((await md.contexts.get('t1', 'c'))!.head, 'va');
    assert.equal((await md.contexts.get('t1', 'vol'))!.head, 'vv');
    assert.equal(await md.tenants.storedBytes('t1'), 3);
  });

  withStore('contexts are unique per tenant; lineage is newest first', async ({ md, root }) => {
    assert.equal(await md.contexts.create({ tenantId: 't1', name: 'c', head: 'v0', image: 'x', createdAt: now(), updatedAt: now() }), false);
    assert.ok(await md.contexts.create({ tenantId: 't1', name: 'b', head: 'v0', image: 'x', createdAt: now(), updatedAt: now() }));
    assert.deepEqual((await md.contexts.list('t1')).map((c) => c.name), ['b', 'c']);
    assert.equal(await md.contexts.count('t1'), 2);
    let prev = root;
    for (let i = 1; i <= 5; i++) {
      const v = version(`v${i}`, prev, [...prev.layers, `l${i}`]);
      assert.ok(await md.versions.commit({ version: v, layer: layer(`l${i}`, i), moveHead: { tenantId: 't1', context: 'c', expectedHead: prev.id } }));
      prev = v;
    }
    assert.deepEqual((await md.versions.lineage('v5', 100)).map((v) => v.id), ['v5', 'v4', 'v3', 'v2', 'v1', 'v0']);
    assert.deepEqual((await md.versions.lineage('v5', 2)).map((v) => v.id), ['v5', 'v4']);
    assert.equal(await md.contexts.delete('t1', 'c'), true);
    assert.equal(await md.contexts.delete('t1', 'c'), false);
    assert.equal(await md.contexts.get('t1', 'c'), null);
    assert.equal((await md.versions.get('v5'))!.context ?? null, null, 'versions outlive their context, disowned');
  });

  withStore('stored bytes count each layer of a tenant once, however many versions share it; drops and squashes keep them exact', async ({ md, root }) => {
    const a = { ...version('a', root, ['image:x:1', 'la']), context: 'c' };
    const b = { ...version('b', a, ['image:x:1', 'la', 'lb']), context: 'c' };
    const c = { ...version('cc', b, ['image:x:1', 'la', 'lb', 'lc']), context: 'c' };
    let head = root.id;
    for (const [v, bytes] of [[a, 10], [b, 20], [c, 30]] as const) {
      assert.ok(await md.versions.commit({ version: v, layer: layer(v.layers.at(-1)!, bytes), moveHead: { tenantId: 't1', context: 'c', expectedHead: head } }));
      head = v.id;
    }
    const u = { ...version('u', a, ['image:x:1', 'la', 'lu']), context: 'c' };
    assert.ok(await md.versions.commit({ version: u, layer: layer('lu', 40) }));
    const m = { ...version('m', c, ['image:x:1', 'la', 'lb', 'lc', 'lu']), merged: 'u', context: 'c' };
    assert.ok(await md.versions.commit({ version: m, moveHead: { tenantId: 't1', context: 'c', expectedHead: 'cc' } }));
    assert.equal(await md.tenants.storedBytes('t1'), 100);
    assert.equal(await md.tenants.totalStoredBytes(), 100);

    // Every layer is still referenced by the head: rows go, layers stay; links to dropped versions are cut.
    const r1 = await md.versions.drop(['a', 'u', 'm'], new Set());
    assert.equal(r1.versions, 2, 'the head m is spared');
    assert.deepEqual(r1.layers, []);
    assert.equal((await md.versions.get('b'))!.parent, null, 'history now starts at b');
    assert.equal((await md.versions.get('m'))!.merged, null);
    assert.deepEqual((await md.versions.lineage('m', 10)).map((v) => v.id), ['m', 'cc', 'b']);
    assert.equal(await md.tenants.storedBytes('t1'), 100);

    // A layer no version refers to goes, unless kept; its bytes are reported and leave the tenant's.
    await md.versions.commit({ version: { ...version('w', root, ['image:x:1', 'lw']), context: 'c' }, layer: layer('lw', 7) });
    assert.equal(await md.tenants.storedBytes('t1'), 107);
    const r2 = await md.versions.drop(['w'], new Set(['lw']));
    assert.deepEqual([r2.versions, r2.layers, r2.deferred], [1, [], 1], 'a kept layer keeps its row');
    assert.equal(await md.tenants.storedBytes('t1'), 100);
    const r3 = await md.versions.dropUnreferencedLayers(new Set(), 10);
    assert.deepEqual(r3.layers.map((l) => [l.id, l.bytes]), [['lw', 7]]);
    assert.deepEqual(await md.versions.knownLayers(['lw']), new Set());

    // A squash: the versions on the prefix move to the squashed layer; the old layers lose those references.
    const n = await md.versions.replaceLayerPrefix(['image:x:1', 'la', 'lb'], ['image:x:1', 'sq'], layer('sq', 30, 'squash'), 'b');
    assert.equal(n, 3, 'b, cc and m');
    assert.deepEqual((await md.versions.get('m'))!.layers, ['image:x:1', 'sq', 'lc', 'lu']);
    const left = await md.versions.dropUnreferencedLayers(new Set(), 10);
    assert.deepEqual(left.layers.map((l) => l.id).sort(), ['la', 'lb'], 'nothing refers to the squashed-away layers');
    assert.equal(await md.tenants.storedBytes('t1'), 100, 'sq 30 + lc 30 + lu 40');

    // Deleting a context disowns its versions.
    assert.ok(await md.contexts.delete('t1', 'c'));
    assert.equal((await md.versions.get('m'))!.context, null);
  });

  withStore('a layer prefix is replaced exactly, never a longer id that starts alike (also without a starting version)', async ({ md, root }) => {
    const a = version('pa', root, ['image:x:1', 'l1', 'l2', 'l3']);
    const b = version('pb', root, ['image:x:1', 'l1', 'l2x']);
    const c = version('pc', root, ['image:x:1', 'l1', 'l2']);
    for (const [v, l] of [[c, 'l2'], [a, 'l3'], [b, 'l2x']] as const) await md.versions.commit({ version: v, layer: layer(l, 1) });
    await md.versions.commit({ version: version('p0', root, ['image:x:1', 'l1']), layer: layer('l1', 1) });
    const n = await md.versions.replaceLayerPrefix(['image:x:1', 'l1', 'l2'], ['image:x:1', 'sq'], layer('sq', 0, 'squash'));
    assert.equal(n, 2);
    assert.deepEqual((await md.versions.get('pa'))!.layers, ['image:x:1', 'sq', 'l3']);
    assert.deepEqual((await md.versions.get('pb'))!.layers, ['image:x:1', 'l1', 'l2x']);
    assert.deepEqual((await md.versions.get('pc'))!.layers, ['image:x:1', 'sq']);
    assert.deepEqual(await md.versions.knownLayers(['sq']), new Set(['sq']));
  });

  withStore('garbage: old history past keepVersions goes, a page at a time, oldest first; heads, roots and pins stay', async ({ md, root }) => {
    // a1..a8 one a day on c; a conflict x off a3 (day 11, still owned); a fork f at a4 with f1 (day 10).
    let prev = root;
    const a: NewVersion[] = [];
    for (let i = 1; i <= 8; i++) {
      const v = { ...version(`a${i}`, prev, [...prev.layers, `la${i}`]), context: 'c', createdAt: at(i) };
      assert.ok(await md.versions.commit({ version: v, layer: layer(`la${i}`, 1), moveHead: { tenantId: 't1', context: 'c', expectedHead: prev.id } }));
      a.push(v);
      prev = v;
    }
    await md.versions.commit({ version: { ...version('x', a[2], [...a[2].layers, 'lx']), context: 'c', createdAt: at(11) }, layer: layer('lx', 1) });
    await md.contexts.create({ tenantId: 't1', name: 'f', head: 'a4', image: 'x', createdAt: now(), updatedAt: now() });
    await md.versions.commit({ version: { ...version('f1', a[3], [...a[3].layers, 'lf']), context: 'f', createdAt: at(10) }, layer: layer('lf', 1), moveHead: { tenantId: 't1', context: 'f', expectedHead: 'a4' } });
    const all = async (cutoff: string, keep: number) => {
      const out: string[] = [];
      for (;;) {
        const page = await md.versions.garbage('t1', { cutoff, keepVersions: keep }, [], 2);
        if (page.length === 0) return out;
        out.push(...page);
        await md.versions.drop(page, new Set());
      }
    };
    assert.deepEqual(await md.versions.garbage('t1', { cutoff: at(0), keepVersions: 1 }, [], 10), [], 'all within retention');
    // Cutoff day 9.5: x (a young conflict) is a root; keep 2 from each root: a8 a7 | f1 a4 | x a3.
    assert.deepEqual(await md.versions.garbage('t1', { cutoff: '2026-01-10T12:00:00.000Z', keepVersions: 2 }, [], 10), ['a1', 'a2', 'a5', 'a6']);
    assert.deepEqual(await md.versions.garbage('t1', { cutoff: '2026-01-10T12:00:00.000Z', keepVersions: 2 }, ['a5'], 10), ['a1', 'a2'], 'a pin keeps itself and what descends from it');
    assert.deepEqual(await md.versions.garbage('t1', { cutoff: '2026-01-10T12:00:00.000Z', keepVersions: 2 }, [], 1), ['a1'], 'oldest first, at most the limit');
    const dropped = await all('2026-01-10T12:00:00.000Z', 2);
    assert.deepEqual(dropped.sort(), ['a1', 'a2', 'a5', 'a6']);
    assert.equal((await md.versions.get('a3'))!.parent, null, 'history now starts at a3');
    // The fork's context goes: its versions are disowned; f1 (young) has no owner and no head reaches it.
    await md.contexts.delete('t1', 'f');
    assert.deepEqual(await md.versions.garbage('t1', { cutoff: at(0), keepVersions: 1 }, [], 10), ['f1'], 'a deleted context\'s versions go at once');
  });

  withStore('garbage: a deleted context\'s versions that a live fork stands on stay', async ({ md, root }) => {
    await md.contexts.create({ tenantId: 't1', name: 'gone', head: 'v0', image: 'x', createdAt: now(), updatedAt: now() });
    const g1 = { ...version('g1', root, ['image:x:1', 'lg1']), context: 'gone' };
    const g2 = { ...version('g2', g1, ['image:x:1', 'lg1', 'lg2']), context: 'gone' };
    await md.versions.commit({ version: g1, layer: layer('lg1', 1), moveHead: { tenantId: 't1', context: 'gone', expectedHead: 'v0' } });
    await md.versions.commit({ version: g2, layer: layer('lg2', 1), moveHead: { tenantId: 't1', context: 'gone', expectedHead: 'g1' } });
    await md.contexts.create({ tenantId: 't1', name: 'kid', head: 'g1', image: 'x', createdAt: now(), updatedAt: now() });
    const k1 = { ...version('k1', g1, ['image:x:1', 'lg1', 'lk1']), context: 'kid' };
    await md.versions.commit({ version: k1, layer: layer('lk1', 1), moveHead: { tenantId: 't1', context: 'kid', expectedHead: 'g1' } });
    await md.contexts.delete('t1', 'gone');
    assert.deepEqual(await md.versions.garbage('t1', { cutoff: at(0), keepVersions: 1 }, [], 10), ['g2'], 'g1 is the fork\'s parent');
  });

  withStore('usage sums per context, kind, day and hour; rolled-up rows count the same', async ({ md }) => {
    const row = (context: string, kind: 'query' | 'service' | 'machine', createdAt: string, wallMs: number) => ({
      tenantId: 't1', context, kind, createdAt, cpuMs: 5, wallMs, memoryPeakBytes: kind === 'machine' ? 512 * 2 ** 20 : 1, bytesWritten: 3, exitCode: 0,
    });
    await md.usage.record(row('a', 'query', '2026-01-01T10:15:00.000Z', 100));
    await md.usage.record(row('a', 'query', '2026-01-01T10:45:00.000Z', 300));
    await md.usage.record(row('b', 'service', '2026-01-01T11:00:00.000Z', 2000));
    await md.usage.record(row('b', 'machine', '2026-01-02T09:00:00.000Z', 4000));
    const before = await md.usage.totals('t1', '2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z', 'context');
    assert.deepEqual(before.map((r) => [r.key, r.queries, r.wallMs, r.serviceSeconds, r.machineSeconds, r.machineMbSeconds, r.cpuMs, r.bytesWritten]),
      [['a', 2, 400, 0, 0, 0, 10, 6], ['b', 0, 6000, 2, 4, 2048, 10, 6]]);
    assert.deepEqual((await md.usage.totals('t1', '2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z', 'kind')).map((r) => r.key), ['machine', 'query', 'service']);
    assert.deepEqual((await md.usage.totals('t1', '2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z', 'day')).map((r) => [r.key, r.wallMs]), [['2026-01-01', 2400], ['2026-01-02', 4000]]);
    assert.equal(await md.usage.rollUp('2026-01-02T00:00:00.000Z', 2), 2, 'a page at a time');
    assert.equal(await md.usage.rollUp('2026-01-02T00:00:00.000Z', 10), 1);
    assert.equal(await md.usage.rollUp('2026-01-02T00:00:00.000Z', 10), 0);
    assert.deepEqual(await md.usage.totals('t1', '2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z', 'context'), before);
    assert.deepEqual((await md.usage.totals('t1', '2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z', 'hour')).map((r) => [r.key, r.queries]),
      [['2026-01-01T10', 2], ['2026-01-01T11', 0], ['2026-01-02T09', 0]]);
    assert.deepEqual(await md.usage.totals('t1', '2026-01-01T11:00:00.000Z', '2026-01-01T12:00:00.000Z', 'context').then((r) => r.map((x) => x.key)), ['b']);
  });

  withStore('the egress log: newest first per context, trimmed by age a page at a time; network policies kept with tenants and contexts', async ({ md }) => {
    const entry = (context: string, time: string, host: string, allowed = true) => ({
      tenantId: 't1', context, kind: 'query' as const, time, host, port: 443, bytesOut: 10, bytesIn: 20, allowed, ...(allowed ? {} : { reason: 'not on the list' }),
    });
    await md.egressLog.record([entry('a', '2026-01-01T00:00:00.000Z', 'old.example'), entry('a', '2026-01-02T00:00:00.000Z', 'x.example', false),
      entry('b', '2026-01-02T00:00:00.000Z', 'b.example'), entry('a', '2026-01-03T00:00:00.000Z', 'new.example')]);
    assert.deepEqual((await md.egressLog.recent('t1', 'a', 10)).map((c) => [c.host, c.allowed, c.reason]),
      [['new.example', true, undefined], ['x.example', false, 'not on the list'], ['old.example', true, undefined]]);
    assert.deepEqual(await md.egressLog.recent('t2', 'a', 10), [], 'per tenant');
    assert.equal(await md.egressLog.trim('2026-01-02T12:00:00.000Z', 2), 2);
    assert.equal(await md.egressLog.trim('2026-01-02T12:00:00.000Z', 2), 1);
    assert.deepEqual((await md.egressLog.recent('t1', 'a', 10)).map((c) => c.host), ['new.example']);
    await md.tenants.create({ id: 'tn', name: 'tn', admin: false, createdAt: now() });
    await md.tenants.setNetwork('tn', { egress: 'allow', domains: ['a.example'] });
    assert.deepEqual((await md.tenants.get('tn'))?.network, { egress: 'allow', domains: ['a.example'] });
    await md.tenants.setNetwork('tn', null);
    assert.equal((await md.tenants.get('tn'))?.network, undefined);
    await md.contexts.create({ tenantId: 'tn', name: 'c', head: 'v0', image: 'debian', createdAt: now(), updatedAt: now(), network: { egress: 'none' } });
    assert.deepEqual((await md.contexts.get('tn', 'c'))?.network, { egress: 'none' });
    assert.equal(await md.contexts.setNetwork('tn', 'c', { egress: 'public' }), true);
    assert.deepEqual((await md.contexts.get('tn', 'c'))?.network, { egress: 'public' });
    assert.equal(await md.contexts.setNetwork('tn', 'missing', null), false);
  });

  withStore('events: one increasing sequence, read per tenant with filters; appending queues deliveries to the webhooks that take them', async ({ md }) => {
    const ev = (tenantId: string, kind: 'version.committed' | 'machine.state' | 'sandbox.lifecycle', time: string, more: { context?: string; machine?: string; data?: Record<string, unknown> } = {}) =>
      ({ tenantId, kind, time, data: more.data ?? {}, ...(more.context ? { context: more.context } : {}), ...(more.machine ? { machine: more.machine } : {}) });
    assert.equal(await md.events.lastId(), 0);
    const hook = { id: 'wh1', tenantId: 't1', url: 'https://a.example/in', keys: ['version.committed', 'sandbox.lifecycle.killed'], name: 'n', secret: 's', enabled: true, format: 'shellbase' as const, createdAt: now() };
    await md.webhooks.create(hook);
    await md.webhooks.create({ ...hook, id: 'wh2', keys: ['machine.state'], enabled: false, format: 'e2b' });
    await md.webhooks.create({ ...hook, id: 'wh3', tenantId: 't2' });
    const { events: rows, deliveries } = await md.events.append([
      ev('t1', 'version.committed', '2026-01-01T00:00:00.000Z', { context: 'a', data: { version: 'v1' } }),
      ev('t1', 'machine.state', '2026-01-02T00:00:00.000Z', { machine: 'm1', data: { state: 'running' } }),
      ev('t2', 'version.committed', '2026-01-02T00:00:00.000Z', { context: 'a' }),
      ev('t1', 'sandbox.lifecycle', '2026-01-03T00:00:00.000Z', { machine: 'm1', data: { type: 'killed', templateId: 'base' } }),
      ev('t1', 'sandbox.lifecycle', '2026-01-03T00:00:00.000Z', { machine: 'm1', data: { type: 'created', templateId: 'base' } }),
    ]);
    const ids = rows.map((r) => r.id);
    assert.equal(deliveries, 3, 't1\'s commit and killed sandbox to wh1, t2\'s commit to wh3');
    assert.deepEqual(await md.events.append([]), { events: [], deliveries: 0 });
    assert.deepEqual([...ids].sort((x, y) => x - y), ids, 'ids increase in order');
    assert.equal(new Set(ids).size, 5);
    assert.equal(await md.events.lastId(), ids[4]);
    assert.deepEqual((await md.events.since('t1', 0, 10)).map((e) => e.id), [ids[0], ids[1], ids[3], ids[4]]);
    assert.deepEqual(await md.events.since('t1', ids[0], 1), [rows[1]]);
    assert.deepEqual((await md.events.since('t1', 0, 10, { kinds: ['machine.state'] })).map((e) => e.data), [{ state: 'running' }]);
    assert.deepEqual((await md.events.since('t1', 0, 10, { context: 'a' })).map((e) => e.id), [ids[0]]);
    assert.deepEqual((await md.events.since('t1', 0, 10, { machine: 'm1', lifecycleTypes: ['created'] })).map((e) => e.id), [ids[4]]);
    assert.deepEqual((await md.events.page('t1', { kinds: ['sandbox.lifecycle'] }, 0, 10, false)).map((e) => e.id), [ids[4], ids[3]]);
    assert.deepEqual((await md.events.page('t1', {}, 1, 2, true)).map((e) => e.id), [ids[1], ids[3]]);
    assert.deepEqual((await md.events.recent(ids[2], 10)).map((e) => e.id), [ids[3], ids[4]]);
    assert.deepEqual((await md.events.recent(ids[0], 2)).map((e) => e.id), [ids[1], ids[2]]);
    assert.deepEqual((await md.events.late(ids[3], '2026-01-02T00:00:00.000Z', 10)).map((e) => e.id), [ids[1], ids[2], ids[3]]);
    // Deliveries: t1's commit and its killed sandbox to wh1 (wh2 is disabled), t2's commit to wh3.
    assert.deepEqual((await md.webhooks.deliveries('t1', 'wh1', 10)).map((d) => [d.eventId, d.kind, d.state, d.attempts]),
      [[ids[3], 'sandbox.lifecycle', 'pending', 0], [ids[0], 'version.committed', 'pending', 0]]);
    assert.deepEqual(await md.webhooks.deliveries('t1', 'wh2', 10), []);
    assert.equal(await md.webhooks.nextDue(), '2026-01-01T00:00:00.000Z');
    const claimed = await md.webhooks.claimDue('2026-01-02T12:00:00.000Z', '2026-01-02T12:01:00.000Z', 10);
    assert.deepEqual(claimed.map((c) => [c.event.id, c.webhook.id]).sort(), [[ids[0], 'wh1'], [ids[2], 'wh3']].sort());
    assert.deepEqual(await md.webhooks.claimDue('2026-01-02T12:00:30.000Z', '2026-01-02T12:02:00.000Z', 10), [], 'claimed ones wait for their claim to run out');
    const first = claimed.find((c) => c.webhook.id === 'wh1')!;
    await md.webhooks.settle(first.delivery.id, { state: 'delivered', attempts: 1, nextAt: '2026-01-02T12:00:00.000Z', lastStatus: 200, updatedAt: '2026-01-02T12:00:00.000Z' });
    const other = claimed.find((c) => c.webhook.id === 'wh3')!;
    await md.webhooks.settle(other.delivery.id, { state: 'pending', attempts: 1, nextAt: '2026-01-02T12:00:05.000Z', lastStatus: 500, lastError: 'the receiver answered 500', updatedAt: '2026-01-02T12:00:00.000Z' });
    assert.deepEqual((await md.webhooks.deliveries('t2', 'wh3', 10)).map((d) => [d.state, d.attempts, d.lastStatus, d.lastError, d.nextAt]),
      [['pending', 1, 500, 'the receiver answered 500', '2026-01-02T12:00:05.000Z']]);
    assert.deepEqual((await md.webhooks.claimDue('2026-01-02T12:00:06.000Z', '2026-01-02T12:01:06.000Z', 10)).map((c) => c.delivery.id), [other.delivery.id], 'settling released the claim');
    // Webhooks: per tenant, by format; updated; deleted with their deliveries.
    assert.deepEqual((await md.webhooks.list('t1')).map((w) => w.id), ['wh1', 'wh2']);
    assert.deepEqual((await md.webhooks.list('t1', 'e2b')).map((w) => w.id), ['wh2']);
    assert.deepEqual(await md.webhooks.get('t1', 'wh1'), hook);
    assert.equal(await md.webhooks.get('t2', 'wh1'), null, 'per tenant');
    assert.equal(await md.webhooks.update({ ...hook, url: 'https://b.example/in', enabled: false }), true);
    assert.equal((await md.webhooks.get('t1', 'wh1'))?.url, 'https://b.example/in');
    assert.equal(await md.webhooks.update({ ...hook, id: 'nope' }), false);
    // Trimming keeps events a delivery still waits for.
    assert.equal(await md.events.trim('2026-01-02T12:00:00.000Z', 10), 2, 'the first commit (delivered) and the machine state go; t2\'s commit waits');
    assert.deepEqual((await md.events.since('t2', 0, 10)).map((e) => e.id), [ids[2]]);
    assert.equal(await md.webhooks.delete('t1', 'wh1'), true);
    assert.equal(await md.webhooks.delete('t1', 'wh1'), false);
    assert.deepEqual(await md.webhooks.deliveries('t1', 'wh1', 10), []);
  });

  withStore('services are unique per context, found by token, and go with their context', async ({ md }) => {
    const spec = { format: 2 as const, command: 'python3 -m http.server', port: 8000, env: {}, idleTimeoutMs: 1000, startTimeoutMs: 30000, limits: {}, access: 'key' as const };
    const row = { tenantId: 't1', context: 'c', name: 'web', token: 'tok1', spec, createdAt: now() };
    assert.equal(await md.services.create(row), true);
    assert.equal(await md.services.create({ ...row, token: 'tok2' }), false, 'one name per context');
    assert.deepEqual(await md.services.get('t1', 'c', 'web'), row);
    assert.deepEqual(await md.services.byToken('tok1'), row);
    assert.equal(await md.services.byToken('tok2'), null);
    assert.ok(await md.services.create({ ...row, name: 'db', token: 'tok3' }));
    assert.deepEqual((await md.services.list('t1', 'c')).map((s) => s.name), ['db', 'web']);
    assert.equal(await md.services.delete('t1', 'c', 'db'), true);
    assert.equal(await md.services.delete('t1', 'c', 'db'), false);
    // Sharing: update replaces a service's spec; shared lists a tenant's services shared beyond their context.
    assert.deepEqual(await md.services.shared('t1'), []);
    const web = { ...row, spec: { ...spec, share: 'tenant' as const } };
    const other = { ...row, context: 'b', token: 'tok4', spec: { ...spec, share: ['c'] } };
    assert.equal(await md.services.update(web), true);
    assert.deepEqual(await md.services.get('t1', 'c', 'web'), web);
    assert.ok(await md.services.create(other));
    assert.ok(await md.services.create({ ...web, tenantId: 't2', token: 'tok5' }));
    assert.deepEqual(await md.services.shared('t1'), [other, web], 'by context, then name; another tenant\'s apart');
    assert.equal(await md.services.update(row), true);
    assert.deepEqual(await md.services.shared('t1'), [other], 'unshared again');
    assert.equal(await md.services.update({ ...row, name: 'none' }), false, 'no such service');
    assert.ok(await md.contexts.delete('t1', 'c'));
    assert.equal(await md.services.byToken('tok1'), null, 'deleting a context deletes its services');
    // A format-1 definition (before access and network) reads as a service reached by URL alone.
    const { format: _f, access: _a, ...v1 } = spec;
    assert.ok(await md.services.create({ ...row, context: 'd', spec: { ...v1, format: 1 } as never }));
    assert.deepEqual((await md.services.byToken('tok1'))?.spec, { ...v1, format: 2, access: 'url' });
  });

  withStore('machines belong to their tenant, port tokens follow their spec, snapshots outlive their machine', async ({ md }) => {
    const shape = { format: 2 as const, image: 'debian', memoryMb: 512, cpus: 1, diskGb: 8, idleTimeoutMs: 1000 };
    const row = { id: 'm_1', tenantId: 't1', state: 'starting' as const, createdAt: now(), spec: { ...shape, disk: ['/d/1.qcow2'], ports: [{ port: 80, token: 'p1' }] } };
    await md.machines.create(row);
    assert.deepEqual(await md.machines.get('t1', 'm_1'), row);
    assert.equal(await md.machines.get('t2', 'm_1'), null, 'another tenant sees nothing');
    assert.deepEqual(await md.machines.find('m_1'), row, 'found by id alone');
    assert.equal(await md.machines.find('m_none'), null);
    // Another API's record rides in `extensions`; one written as a top-level `e2b` (before the slot) reads from there.
    const record = { format: 1, accessToken: 'a' };
    await md.machines.create({ ...row, id: 'm_ext', spec: { ...row.spec, ports: [], extensions: { e2b: record, other: 1 } } });
    assert.deepEqual((await md.machines.find('m_ext'))?.spec.extensions, { e2b: record, other: 1 });
    await md.machines.create({ ...row, id: 'm_old', spec: { ...row.spec, ports: [], e2b: record } as never });
    const legacy = await md.machines.find('m_old');
    assert.deepEqual([legacy?.spec.extensions, 'e2b' in (legacy?.spec ?? {})], [{ e2b: record }, false]);
    await md.machines.delete('t1', 'm_ext');
    await md.machines.delete('t1', 'm_old');
    assert.deepEqual((await md.machines.byPortToken('p1'))?.port, 80);
    const moved = { ...row, state: 'running' as const, spec: { ...row.spec, ports: [{ port: 8080, token: 'p2' }] } };
    await md.machines.update(moved);
    assert.equal(await md.machines.byPortToken('p1'), null, 'a token the spec no longer names is gone');
    assert.deepEqual(await md.machines.byPortToken('p2'), { machine: moved, port: 8080 });
    await md.machines.create({ ...row, id: 'm_2', tenantId: 't2', spec: { ...row.spec, ports: [] } });
    assert.deepEqual((await md.machines.list('t1')).map((m) => m.id), ['m_1']);
    assert.deepEqual((await md.machines.list()).map((m) => m.id).sort(), ['m_1', 'm_2']);
    const snap = { id: 's_1', tenantId: 't1', machineId: 'm_1', createdAt: now(),
      spec: { ...shape, disk: ['/d/0.qcow2'], ram: '/s/ram', state: '/s/state.bin', qemu: 'QEMU 7.2', machineType: 'microvm', accel: 'tcg', ports: [8080] } };
    await md.machines.createSnapshot(snap);
    assert.equal(await md.machines.delete('t2', 'm_1'), false, 'only by its tenant');
    assert.equal(await md.machines.delete('t1', 'm_1'), true);
    assert.equal(await md.machines.byPortToken('p2'), null);
    assert.deepEqual(await md.machines.getSnapshot('t1', 's_1'), snap);
    assert.equal(await md.machines.getSnapshot('t2', 's_1'), null);
    assert.deepEqual((await md.machines.listSnapshots('t1')).map((s) => s.id), ['s_1']);
    assert.deepEqual((await md.machines.listSnapshots()).map((s) => s.id), ['s_1']);
    assert.equal(await md.machines.deleteSnapshot('t1', 's_1'), true);
    assert.equal(await md.machines.deleteSnapshot('t1', 's_1'), false);
    // A spec of format 1 (before disks had sizes) reads as format 2 with the one size disks had then.
    const { diskGb: _d, ...old } = { ...row.spec, format: 1 };
    await md.machines.create({ ...row, id: 'm_3', spec: old as unknown as typeof row.spec });
    assert.deepEqual((await md.machines.get('t1', 'm_3'))!.spec, { ...row.spec, format: 2, diskGb: 8 });
    await md.machines.createSnapshot({ ...snap, id: 's_2', spec: { ...snap.spec, format: 1, diskGb: undefined } as unknown as typeof snap.spec });
    assert.equal((await md.machines.getSnapshot('t1', 's_2'))!.spec.diskGb, 8);
  });

  withStore('tenants: names are unique, keys map to tenants by hash and are revoked one or all; quotas are kept', async ({ md }) => {
    assert.equal(await md.tenants.create({ id: 't9', name: 'one', admin: false, createdAt: now() }), false, 'the name is taken');
    assert.ok(await md.tenants.create({ id: 't0', name: 'admin', admin: true, createdAt: now() }));
    assert.equal((await md.tenants.admin())!.id, 't0');
    assert.deepEqual((await md.tenants.list()).map((t) => t.name), ['admin', 'one']);
    assert.deepEqual(await md.tenants.ids(null, 1), ['t0']);
    assert.deepEqual(await md.tenants.ids('t0', 10), ['t1']);
    assert.equal((await md.tenants.byName('one'))!.id, 't1');
    assert.equal(await md.tenants.get('nope'), null);
    await md.tenants.setQuotas('t1', { contexts: 3 });
    assert.deepEqual((await md.tenants.get('t1'))!.quotas, { contexts: 3 });
    await md.tenants.addKey('t1', 'aaaaaaaaaaaa-1');
    await md.tenants.addKey('t1', 'bbbbbbbbbbbb-2');
    assert.equal((await md.tenants.byKey('aaaaaaaaaaaa-1'))!.id, 't1');
    assert.equal(await md.tenants.byKey('hash-3'), null);
    assert.deepEqual((await md.tenants.listKeys('t1')).map((k) => k.id), ['k_aaaaaaaaaaaa', 'k_bbbbbbbbbbbb']);
    assert.equal(await md.tenants.revokeKeys('t1', 'k_aaaaaaaaaaaa'), 1);
    assert.equal(await md.tenants.byKey('aaaaaaaaaaaa-1'), null);
    assert.equal(await md.tenants.revokeKeys('t1'), 1);
    assert.equal(await md.tenants.byKey('bbbbbbbbbbbb-2'), null);
    assert.ok((await md.tenants.listKeys('t1')).every((k) => k.revokedAt !== null));
  });

  withStore('contexts keep defaults and config; update changes them, and the head only by compare-and-set', async ({ md, root }) => {
    const defaults = { env: { A: '1' }, cwd: '/app', user: 'app' };
    const config = { cmd: ['python3'], exposedPorts: ['80/tcp'], labels: { l: 'v' } };
    assert.ok(await md.contexts.create({ tenantId: 't1', name: 'd', head: 'v0', image: 'x', createdAt: now(), updatedAt: now(), defaults, config }));
    const got = (await md.contexts.get('t1', 'd'))!;
    assert.deepEqual([got.defaults, got.config], [defaults, config]);
    assert.equal((await md.contexts.get('t1', 'c'))!.defaults, undefined, 'a context made without defaults has none');
    assert.ok(await md.contexts.update('t1', 'd', { defaults: { cwd: '/srv' }, updatedAt: now() }));
    assert.deepEqual((await md.contexts.get('t1', 'd'))!.defaults, { cwd: '/srv' });
    const v = version('vd', root, ['image:x:1', 'ld']);
    assert.ok(await md.versions.commit({ version: v, layer: layer('ld', 3) }));
    assert.equal(await md.contexts.update('t1', 'd', { head: { expected: 'nope', to: 'vd' }, image: 'y', updatedAt: now() }), false);
    assert.equal((await md.contexts.get('t1', 'd'))!.image, 'x', 'a failed compare-and-set changes nothing');
    assert.ok(await md.contexts.update('t1', 'd', { head: { expected: 'v0', to: 'vd' }, image: 'y', config: {}, updatedAt: now() }));
    const moved = (await md.contexts.get('t1', 'd'))!;
    assert.deepEqual([moved.head, moved.image, moved.config, moved.defaults], ['vd', 'y', undefined, { cwd: '/srv' }], 'an empty config is none');
    assert.equal(await md.contexts.update('t1', 'nope', { updatedAt: now() }), false);
  });

  withStore('images name root versions that collection keeps; imported layers are found by digest; the build cache goes with its versions', async ({ md, root }) => {
    const digest = (c: string) => `sha256:${c.repeat(64)}`;
    await md.versions.addLayer({ ...layer('o_a', 100, 'import'), digest: digest('a') });
    await md.versions.addLayer({ ...layer('o_b', 20, 'import'), digest: digest('b') });
    assert.deepEqual(await md.versions.layerByDigest(digest('a')), { ...layer('o_a', 100, 'import'), digest: digest('a'), createdAt: (await md.versions.layerByDigest(digest('a')))!.createdAt });
    assert.equal(await md.versions.layerByDigest(digest('c')), null);
    const img = version('vi', null, ['o_a', 'o_b'], null, { cause: { kind: 'image', command: 'r/x:1' }, bytes: 120 });
    const config = { format: 1 as const, env: { PATH: '/bin' }, cwd: '/w', diffIds: [digest('a'), digest('b')] };
    await md.images.put({ tenantId: 't1', ref: 'r/x:1', digest: digest('d'), version: 'vi', config, bytes: 120, createdAt: now() }, img);
    await md.images.put({ tenantId: 't1', ref: 'r/x:latest', digest: digest('d'), version: 'vi', config, bytes: 120, createdAt: now() });
    assert.deepEqual((await md.images.list('t1')).map((i) => i.ref), ['r/x:1', 'r/x:latest']);
    assert.deepEqual((await md.images.get('t1', 'r/x:1'))!.config, config);
    assert.equal((await md.images.byDigest('t1', digest('d')))!.version, 'vi');
    assert.equal(await md.images.get('t2', 'r/x:1'), null, 'images are the tenant\'s');
    assert.equal(await md.tenants.storedBytes('t1'), 120, 'an image\'s layers are its tenant\'s stored bytes');
    assert.ok(await md.versions.tenantRefersTo('t1', 'o_a'));
    assert.equal(await md.versions.tenantRefersTo('t2', 'o_a'), false);
    const built = version('vb', img, ['o_a', 'o_b', 'lb'], [], { context: 'c' });
    assert.ok(await md.versions.commit({ version: built, layer: layer('lb', 1) }));
    await md.buildCache.put('t1', 'k1', 'vb', now());
    await md.buildCache.put('t1', 'k1', 'vb', now());
    assert.equal(await md.buildCache.get('t1', 'k1'), 'vb');
    assert.equal(await md.buildCache.get('t2', 'k1'), null);
    const retention = { cutoff: at(-3650), keepVersions: 1 };
    assert.deepEqual(await md.versions.garbage('t1', retention, [], 10), [], 'an image\'s root version stays while it is named');
    assert.equal((await md.versions.drop(['vi'], new Set())).versions, 0, 'and is never dropped');
    assert.ok(await md.images.delete('t1', 'r/x:1'));
    assert.equal(await md.images.delete('t1', 'r/x:1'), false);
    assert.deepEqual(await md.versions.garbage('t1', retention, [], 10), [], 'another reference still names it');
    assert.ok(await md.images.delete('t1', 'r/x:latest'));
    assert.deepEqual(await md.versions.garbage('t1', retention, [], 10), [], 'a version owned by a context stands on it');
    assert.ok(await md.contexts.delete('t1', 'c'));
    assert.deepEqual((await md.versions.garbage('t1', retention, [], 10)).sort(), ['vb', 'vi']);
    const r = await md.versions.drop(['vb', 'vi'], new Set());
    assert.deepEqual(r.layers.map((l) => l.id).sort(), ['lb', 'o_a', 'o_b'], 'unreferenced imported layers go');
    assert.equal(await md.buildCache.get('t1', 'k1'), null, 'a dropped version\'s cache entry goes with it');
    assert.equal(await md.tenants.storedBytes('t1'), 0);
    assert.equal(root.id, 'v0');
  });

  withStore('numbers past 2^31 (bytes, milliseconds) come back as numbers, exact', async ({ md, root }) => {
    const big = 5 * 2 ** 30 + 7;
    const v = { ...version('big', root, ['image:x:1', 'lbig']), bytes: big };
    assert.ok(await md.versions.commit({ version: v, layer: layer('lbig', big), moveHead: { tenantId: 't1', context: 'c', expectedHead: 'v0' } }));
    assert.strictEqual((await md.versions.get('big'))!.bytes, big);
    assert.strictEqual(await md.versions.layerBytes(['lbig']), big);
    assert.strictEqual(await md.tenants.storedBytes('t1'), big);
    assert.strictEqual(await md.tenants.totalStoredBytes(), big);
    const wallMs = 3e9; // 35 days of a 64 GiB machine: bytes × ms is past 2^63
    await md.usage.record({ tenantId: 't1', context: 'c', kind: 'machine', createdAt: '2026-01-01T00:00:00.000Z', cpuMs: wallMs, wallMs,
      memoryPeakBytes: 64 * 2 ** 30, bytesWritten: big, exitCode: null, egressBytes: big, ingressBytes: big, activeMs: wallMs / 2 });
    const check = async () => {
      const [t] = await md.usage.totals('t1', '2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z', 'kind');
      assert.deepStrictEqual(t, { key: 'machine', queries: 0, cpuMs: wallMs, wallMs, serviceSeconds: 0, machineSeconds: wallMs / 1000,
        machineMbSeconds: wallMs * 65536 / 1000, bytesWritten: big, egressBytes: big, ingressBytes: big, serviceActiveSeconds: 0, machineActiveSeconds: wallMs / 2000 });
    };
    await check();
    assert.equal(await md.usage.rollUp('2026-01-02T00:00:00.000Z', 10), 1);
    await check();
    await md.egressLog.record([{ tenantId: 't1', context: 'c', kind: 'machine', time: now(), host: 'h', port: 443, bytesOut: big, bytesIn: big, allowed: true }]);
    assert.deepStrictEqual((await md.egressLog.recent('t1', 'c', 1)).map((c) => [c.port, c.bytesOut, c.bytesIn]), [[443, big, big]]);
    await md.versions.commit({ version: { ...version('big2', root, ['image:x:1', 'lbig2']), context: 'c' }, layer: layer('lbig2', big) });
    assert.deepStrictEqual((await md.versions.drop(['big2'], new Set())).layers.map((l) => l.bytes), [big]);
  });

  withStore('sync and reclaim run at any time', async ({ md }) => {
    await md.sync();
    const left = await md.reclaim(64);
    assert.ok(Number.isInteger(left) && left >= 0, `free pages left: ${left}`);
  });
}

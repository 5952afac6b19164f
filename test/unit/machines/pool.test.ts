import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fastMachines, type FastMachines } from './fast-machines.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const templateOf = async (t: FastMachines, tenant: string, id: string) => path.dirname((await t.machines.rowOf(await t.caller(tenant), id)).spec.disk[1]!);
const until = async (what: string, ok: () => boolean) => {
  for (let i = 0; i < 200 && !ok(); i++) await sleep(10);
  assert.ok(ok(), what);
};

test('templates: one per source and size, built once and shared; a context\'s version is its disk; unused ones of tenants\' versions are collected', async () => {
  const t = await fastMachines({ machines: { templateIdleMs: 0 } });
  try {
    const c = await t.caller();
    const a = await t.machines.create(c, {});
    const b = await t.machines.create(c, {});
    const tpl = await templateOf(t, 't1', a.id);
    assert.equal(await templateOf(t, 't1', b.id), tpl, 'one template for one image and size');
    const builtAt = JSON.parse(readFileSync(path.join(tpl, 'info.json'), 'utf8')).builtAt;
    const small = await t.machines.create(c, { memoryMb: 256 });
    assert.notEqual(await templateOf(t, 't1', small.id), tpl, 'another size, another template');
    assert.equal(JSON.parse(readFileSync(path.join(tpl, 'info.json'), 'utf8')).builtAt, builtAt, 'built once');
    assert.equal(readFileSync(path.join(tpl, 'console.log'), 'utf8').match(/booted/g)?.length, 1, 'one boot');

    await t.fake.engine.exec(c, 'app', { command: 'echo from-the-context > /root/app.txt' });
    const m = await t.machines.create(c, { context: 'app' });
    assert.equal((await t.machines.exec(c, m.id, { command: 'cat /root/app.txt' })).stdout, 'from-the-context\n');
    const ctxTpl = await templateOf(t, 't1', m.id);
    assert.ok(ctxTpl.startsWith(t.fake.engine.deps.config.home), 'a tenant\'s version has its template in the tenant\'s directory');
    assert.equal(await t.machines.collectTemplates(), 0, 'a template a machine stands on stays');
    for (const x of [a, b, small, m]) await t.machines.remove(c, x.id);
    assert.equal(await t.machines.collectTemplates(), 1, 'unused, it goes');
    assert.equal(existsSync(ctxTpl), false);
    assert.equal(existsSync(tpl), true, 'images\' templates live in the shared cache: they stay');
  } finally {
    await t.close();
  }
});

test('ready VMs: made for a hot template, taken by the next create, counted by admission and given up for room', async () => {
  const t = await fastMachines({ machines: { readyPerTemplate: 1, maxRunning: 4 } });
  try {
    const c = await t.caller();
    const a = await t.machines.create(c, {});
    assert.deepEqual(t.machines.readyStats, { taken: 0, missed: 1, ready: 0 });
    await until('a ready VM is made for the hot template', () => t.machines.readyStats.ready === 1);
    assert.equal(t.backend.vms.size, 2, 'it is a VM of its own');
    const b = await t.machines.create(c, {});
    assert.deepEqual(t.machines.readyStats, { taken: 1, missed: 1, ready: 0 });
    assert.equal((await t.machines.exec(c, b.id, { command: 'echo ready-made' })).stdout, 'ready-made\n');
    const clock = Number((await t.machines.exec(c, b.id, { command: 'date +%s' })).stdout);
    assert.ok(Math.abs(clock - Date.now() / 1000) < 5, 'its guest was settled when taken');
    // A ready VM is made only where the host has room for it and one more machine of its size.
    await until('another is made', () => t.machines.readyStats.ready === 1);
    const small = await t.machines.create(c, { memoryMb: 256 });
    assert.deepEqual([t.machines.readyStats.ready, t.backend.vms.size], [1, 4], 'three machines and a ready VM fill the host\'s four');
    const tiny = await t.machines.create(c, { memoryMb: 128 });
    assert.equal(tiny.state, 'running', 'a create that fits without the ready VM ends it for room');
    assert.deepEqual([t.machines.readyStats.ready, t.backend.vms.size], [0, 4]);
    for (const m of [a, b, small, tiny]) await t.machines.remove(c, m.id);
    await t.close();
    assert.equal(t.backend.vms.size, 0, 'closing ends the ready VMs');
    const home = t.fake.engine.deps.config.home;
    assert.deepEqual(existsSync(path.join(home, 'machines/run')) ? readdirSync(path.join(home, 'machines/run')) : [], []);
  } finally {
    await t.close();
  }
});

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { Cluster, LeaseKind } from '../../packages/server/src/core/cluster.ts';
import { MachineLayout } from '../../packages/server/src/machines/layout.ts';
import { MachinePlacement } from '../../packages/server/src/machines/placement.ts';
import type { MachineStowage } from '../../packages/server/src/machines/storage/stowage.ts';
import type { MachineRow, MetadataStore } from '../../packages/server/src/store/metadata/types.ts';
import type { ServerConfig } from '../../packages/server/src/config.ts';

/**
 * The part of a cluster that machine placement uses, in memory: leases by epoch, one slot count.
 * `onAdmit` runs inside `admit`, before it answers (a lease taken over at that instant).
 */
function fakeCluster(onAdmit: () => void) {
  let lost: ((kind: LeaseKind, key: string) => void) | null = null;
  const state = { slots: 0, epoch: 0, unclaimed: 0 };
  const cluster = {
    workerId: 'w1',
    leaseLost: (l: (kind: LeaseKind, key: string) => void) => { lost = l; },
    claim: async () => ({ mine: true as const, epoch: ++state.epoch }),
    unclaim: async () => { state.unclaimed++; },
    admit: async () => { state.slots++; onAdmit(); return true; },
    release: async () => { state.slots--; },
    releaseBlobs: async () => undefined,
  } as unknown as Cluster;
  return { cluster, state, takeOver: (id: string) => lost!('machine', id) };
}

test('placement: a lease taken over while a wake takes its slot gives the slot back and fails the wake', async () => {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-placement-'));
  try {
    let takeOver = (_id: string) => {};
    const fake = fakeCluster(() => takeOver('m1'));
    takeOver = fake.takeOver;
    const layout = new MachineLayout(home, path.join(home, 'cache'));
    const placement = new MachinePlacement(fake.cluster, {} as MachineStowage, {} as MetadataStore, layout, {} as ServerConfig);
    const row = { id: 'm1', tenantId: 't1', state: 'hibernated', spec: { disk: [path.join(home, 'disk')] } } as unknown as MachineRow;
    const saved = { ram: path.join(home, 'ram'), state: path.join(home, 'state') };
    await assert.rejects(placement.unstow(row, saved), (e: Error & { code?: string }) => e.code === 'unavailable' && /taken over/.test(e.message));
    assert.equal(fake.state.slots, 0, 'no slot is left taken');
    assert.equal(placement.holds('m1'), false);
    assert.equal(fake.state.unclaimed, 0, 'a lease another worker holds now is not given up by this one');
    // Without a take-over the wake keeps its lease and its slot.
    takeOver = () => {};
    assert.equal((await placement.unstow(row, saved)).id, 'm1');
    assert.equal(fake.state.slots, 1);
    assert.equal(placement.holds('m1'), true);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { Cluster, LeaseKind } from '../../packages/server/src/core/cluster.ts';
import { MachineLayout } from '../../packages/server/src/machines/layout.ts';
import { MachinePlacement } from '../../packages/server/src/machines/placement.ts';
import type { MachineStowage } from '../../packages/server/src/machines/storage/stowage.ts';
import type { MachineRun } from '../../packages/server/src/machines/run.ts';
import type { MachineRow, MetadataStore } from '../../packages/server/src/store/metadata/types.ts';
import type { ServerConfig } from '../../packages/server/src/config.ts';

/**
 * The part of a cluster that machine placement uses, in memory: leases by epoch, one slot count.
 * `onAdmit` runs inside `admit`, before it answers (a lease taken over at that instant).
 */
function fakeCluster(onAdmit: () => void) {
  let lost: ((kind: LeaseKind, key: string) => void) | null = null;
  /** `elsewhere`: another worker holds every lease (a claim is refused). */
  const state = { slots: 0, epoch: 0, claimed: 0, unclaimed: 0, elsewhere: false };
  const cluster = {
    workerId: 'w1',
    leaseLost: (l: (kind: LeaseKind, key: string) => void) => { lost = l; },
    claim: async () => {
      if (state.elsewhere) return { mine: false as const, gateway: 'http://w2' };
      state.claimed++;
      return { mine: true as const, epoch: ++state.epoch };
    },
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

test('placement: a row written by a worker that does not run the machine is written under a lease taken for the write, and given back', async () => {
  const fake = fakeCluster(() => {});
  const placement = new MachinePlacement(fake.cluster, {} as MachineStowage, {} as MetadataStore, {} as MachineLayout, {} as ServerConfig);
  const fences: unknown[] = [];
  const taken: string[] = [];
  placement.onTaken((id) => taken.push(id));
  await placement.leased('m1', async (f) => { fences.push(f); });
  assert.deepEqual(fences, [{ kind: 'machine', key: 'm1', worker: 'w1', epoch: 1 }]);
  assert.deepEqual([fake.state.claimed, fake.state.unclaimed, placement.holds('m1')], [1, 1, false], 'taken for the write, given back after');
  assert.deepEqual(taken, [], 'a lease held for a write is nobody\'s news (no timers armed for it)');
  // Two writes at once share one lease; it goes back when the last one ends.
  let release = () => {};
  const slow = placement.leased('m1', () => new Promise<void>((r) => { release = r; }));
  await new Promise((r) => setImmediate(r));
  await placement.leased('m1', async () => undefined);
  assert.deepEqual([fake.state.unclaimed, placement.holds('m1')], [1, true], 'kept while the other write is under way');
  release();
  await slow;
  assert.deepEqual([fake.state.claimed, fake.state.unclaimed, placement.holds('m1')], [2, 2, false]);
  // Another worker runs it: the write is refused, not made unfenced.
  fake.state.elsewhere = true;
  let wrote = false;
  await assert.rejects(placement.leased('m1', async () => { wrote = true; }), (e: Error & { code?: string }) => e.code === 'unavailable');
  assert.equal(wrote, false);
  // A wake here during the write makes the lease its own: it is kept, and now it is news.
  fake.state.elsewhere = false;
  await placement.leased('m1', async () => { await placement.take('m1'); });
  assert.equal(placement.holds('m1'), true);
  assert.equal(fake.state.unclaimed, 2);
  assert.deepEqual(taken, ['m1']);
  // Held already: the held lease fences the write, nothing is claimed or given back.
  await placement.leased('m1', async (f) => { fences.push(f); });
  assert.deepEqual(fences.at(-1), { kind: 'machine', key: 'm1', worker: 'w1', epoch: 3 });
  assert.deepEqual([fake.state.claimed, fake.state.unclaimed], [3, 2]);
});

test('placement: catching up with the store keeps a lost lease\'s epoch while a step of this worker\'s own is under way', async () => {
  const fake = fakeCluster(() => {});
  const fresh = { id: 'm1', tenantId: 't1', state: 'hibernated', spec: {} } as unknown as MachineRow;
  const metadata = { machines: { get: async () => fresh } } as unknown as MetadataStore;
  const placement = new MachinePlacement(fake.cluster, {} as MachineStowage, metadata, {} as MachineLayout, {} as ServerConfig);
  await placement.take('m1');
  fake.takeOver('m1');
  const stale = { kind: 'machine', key: 'm1', worker: 'w1', epoch: 1 };
  assert.deepEqual(placement.fence('m1'), stale, 'taken over: its writes are fenced by the epoch it held');
  // A hibernation's upload is under way: a gateway's catch-up leaves the fence (and the run's row) alone.
  const run = { row: { ...fresh, state: 'running' }, vm: null, busy: true };
  await placement.settle(run as unknown as MachineRun);
  assert.deepEqual(placement.fence('m1'), stale);
  assert.equal(run.row.state, 'running');
  // Once nothing of its own runs, it catches up: the store's row, and no fence (a later write takes a lease).
  run.busy = false;
  await placement.settle(run as unknown as MachineRun);
  assert.equal(placement.fence('m1'), undefined);
  assert.equal(run.row.state, 'hibernated');
});

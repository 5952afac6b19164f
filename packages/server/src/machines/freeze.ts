import { renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { newId } from '../util/ids.js';
import { copySparse, overlay } from './disk.js';
import { runFiles } from './layout.js';
import { copyLive } from './live-copy.js';
import type { MachineRun } from './run.js';

/**
 * The two ways `MachineRun.freeze` copies a machine: both leave a RAM file and device state saved
 * without RAM in `into`, the disk's chain frozen at the same instant (returned), and a new overlay
 * on top that takes the machine's writes from then on (in its row, saved).
 */

/** The disk as it stands (to be frozen) and a new overlay of its top, to take the writes from the freeze on. */
async function nextTop(run: MachineRun): Promise<{ frozen: string[]; next: string }> {
  const frozen = [...run.row.spec.disk];
  const next = run.hooks.host.layout.diskFile(run.row.tenantId, `${run.row.id}-${newId('d')}`);
  await overlay(frozen[0], next);
  run.hooks.host.give(next);
  return { frozen, next };
}

/** While it runs (machines/live-copy.ts); the pause holds only the switch to an overlay opened before. */
export async function freezeLive(run: MachineRun, into: { ram: string; state: string }): Promise<string[]> {
  const vm = run.vm!;
  const { frozen, next } = await nextTop(run);
  const node = await vm.openOverlay(next);
  let switched = false;
  try {
    const pauseMs = await copyLive(run.hooks.host, vm, {
      dir: path.join(run.dir, 'copy'), ram: into.ram, state: into.state, top: frozen[0],
      atSwitchover: async () => { await vm.useOverlay(node); switched = true; run.row.spec.disk = [next, ...frozen]; },
    });
    run.hooks.step('freeze', pauseMs);
    return frozen;
  } finally {
    // QEMU writes to `next` once switched, whatever happened after.
    if (switched) await run.hooks.save(run.row);
    else { await vm.dropOverlay(node).catch(() => undefined); rmSync(next, { force: true }); }
  }
}

/** Stopped for the copy of the RAM it uses (~0.8 ms per MiB here), then let go on if it ran. */
export async function freezeStopped(run: MachineRun, into: { ram: string; state: string }, used: number): Promise<string[]> {
  const vm = run.vm!;
  const { frozen, next } = await nextTop(run);
  const wasRunning = run.row.state === 'running';
  const t0 = performance.now();
  if (wasRunning) await vm.stop();
  let switched = false;
  try {
    await vm.snapshotDisk(next);
    switched = true;
    run.row.spec.disk = [next, ...frozen];
    // QEMU writes only inside its own directory; the state moves to the snapshot's after.
    const state = runFiles(run.dir).frozenState;
    await vm.saveState(state);
    renameSync(state, into.state);
    await copySparse(run.ramFile, into.ram);
  } finally {
    if (wasRunning) await vm.cont();
    const ms = performance.now() - t0;
    run.hooks.step('freeze', ms);
    if (wasRunning) run.hooks.stoppedCopy(ms, used);
    if (switched) await run.hooks.save(run.row);
    else rmSync(next, { force: true });
  }
  return frozen;
}

import { renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { newId } from '../../util/ids.js';
import { copySparse, overlay } from './disk.js';
import { runFiles } from '../layout.js';
import { copyLive, LiveCopyError, sparsify, usedMiB } from '../vm/live-copy.js';
import type { MachineRow } from '../../store/metadata/types.js';
import type { QemuVm } from '../vm/qemu.js';
import type { RunHooks } from '../run-hooks.js';

/** What a freeze reads and changes of a machine's run (machines/run.ts `MachineRun`). */
export interface FreezingRun {
  row: MachineRow;
  vm: QemuVm | null;
  readonly dir: string;
  readonly ramFile: string;
  /** Set while a live copy runs: the machine takes users meanwhile. */
  copying: boolean;
  readonly hooks: Pick<RunHooks, 'host' | 'save' | 'step' | 'stoppedCopy'>;
}

/**
 * The two ways `MachineRun.freeze` copies a machine: both leave a RAM file and device state saved
 * without RAM in `into`, the disk's chain frozen at the same instant (returned), and a new overlay
 * on top that takes the machine's writes from then on (in its row, saved).
 */

/** The disk as it stands (to be frozen) and a new overlay of its top, to take the writes from the freeze on. */
async function nextTop(run: FreezingRun): Promise<{ frozen: string[]; next: string }> {
  const frozen = [...run.row.spec.disk];
  const next = run.hooks.host.layout.diskFile(run.row.tenantId, `${run.row.id}-${newId('d')}`);
  await overlay(frozen[0], next);
  run.hooks.host.give(next);
  return { frozen, next };
}

/**
 * While it runs (machines/vm/live-copy.ts); the pause holds only the switch to an overlay opened
 * before. Throws `LiveCopyError` when the copy did not finish (the caller makes a stopped one).
 */
export async function freezeLive(run: FreezingRun, into: { ram: string; state: string }): Promise<string[]> {
  const vm = run.vm!;
  const { frozen, next } = await nextTop(run);
  let node: string | null = null;
  let switched = false;
  let saved = false;
  let saveFailed: unknown = null;
  const save = async () => { saved = true; await run.hooks.save(run.row).catch((e: unknown) => { saveFailed = e; throw e; }); };
  run.copying = true;
  try {
    node = await vm.openOverlay(next);
    const top = node;
    const pauseMs = await copyLive(run.hooks.host, vm, {
      dir: path.join(run.dir, 'copy'), ram: into.ram, state: into.state, top: frozen[0],
      readable: [...new Set(frozen.map((f) => path.dirname(f)))],
      atSwitchover: async () => { await vm.useOverlay(top); switched = true; run.row.spec.disk = [next, ...frozen]; },
      resumed: save,
    });
    run.hooks.step('freeze', pauseMs);
    return frozen;
  } catch (e) {
    if (!switched) {
      if (node) await vm.dropOverlay(node).catch(() => undefined);
      rmSync(next, { force: true });
    }
    // A row that cannot be written is no copy's fault: no stopped copy follows.
    if (saveFailed) throw saveFailed;
    throw e instanceof LiveCopyError ? e : new LiveCopyError(`the live copy failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  } finally {
    run.copying = false;
    // QEMU writes to `next` once switched, whatever happened after.
    if (switched && !saved) await save();
  }
}

/** Stopped for the copy of the RAM it uses (~0.8 ms per MiB here), then let go on if it ran. */
export async function freezeStopped(run: FreezingRun, into: { ram: string; state: string }): Promise<string[]> {
  const vm = run.vm!;
  const { frozen, next } = await nextTop(run);
  const used = usedMiB(run.ramFile);
  const wasRunning = run.row.state === 'running';
  const t0 = performance.now();
  let stopped = false;
  let switched = false;
  try {
    if (wasRunning) { await vm.stop(); stopped = true; }
    await vm.snapshotDisk(next);
    switched = true;
    run.row.spec.disk = [next, ...frozen];
    // QEMU writes only inside its own directory; the state moves to the snapshot's after.
    const state = runFiles(run.dir).frozenState;
    await vm.saveState(state);
    renameSync(state, into.state);
    await copySparse(run.ramFile, into.ram);
  } finally {
    if (stopped) await vm.cont();
    const ms = performance.now() - t0;
    run.hooks.step('freeze', ms);
    if (wasRunning) run.hooks.stoppedCopy(ms, used);
    if (switched) await run.hooks.save(run.row);
    else rmSync(next, { force: true });
  }
  // A RAM file a live copy read whole holds zero pages as data: the copy keeps them out.
  if (used >= run.row.spec.memoryMb * 0.9) await sparsify(into.ram);
  return frozen;
}

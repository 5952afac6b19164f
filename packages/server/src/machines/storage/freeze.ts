import path from 'node:path';
import { rmSync } from 'node:fs';
import { newId } from '../../util/ids.js';
import { LiveCopyError, type Vm } from '../vm/types.js';
import type { MachineRow } from '../../store/metadata/types.js';
import type { RunHooks } from '../run-hooks.js';

/** What a freeze reads and changes of a machine's run (machines/run.ts `MachineRun`). */
export interface FreezingRun {
  row: MachineRow;
  vm: Vm | null;
  readonly dir: string;
  /** Set while a live copy runs: the machine takes users meanwhile. */
  copying: boolean;
  readonly hooks: Pick<RunHooks, 'host' | 'save' | 'step' | 'stoppedCopy'>;
}

/**
 * The two ways `MachineRun.freeze` copies a machine: both leave a memory file and device state in
 * `into`, the disk's chain frozen at the same instant (returned), and a new overlay on top that
 * takes the machine's writes from then on (in its row, saved).
 */

/** The disk as it stands (to be frozen) and a new overlay of its top, to take the writes from the freeze on. */
async function nextTop(run: FreezingRun): Promise<{ frozen: string[]; next: string }> {
  const frozen = [...run.row.spec.disk];
  const next = run.hooks.host.layout.diskFile(run.row.tenantId, `${run.row.id}-${newId('d')}`);
  await run.hooks.host.backend.overlay(frozen[0], next);
  return { frozen, next };
}

/**
 * While it runs (the VM's `copyLive`): the pause holds only the last of its memory and the switch
 * to the new top. Throws `LiveCopyError` when the copy did not finish (the caller makes a stopped one).
 */
export async function freezeLive(run: FreezingRun, into: { ram: string; state: string }): Promise<string[]> {
  const vm = run.vm!;
  const { frozen, next } = await nextTop(run);
  let switched = false;
  let saved = false;
  let saveFailed: unknown = null;
  const save = async () => { saved = true; await run.hooks.save(run.row).catch((e: unknown) => { saveFailed = e; throw e; }); };
  run.copying = true;
  try {
    const pauseMs = await vm.copyLive!({
      dir: path.join(run.dir, 'copy'), ram: into.ram, state: into.state, frozen, next,
      switched: () => { switched = true; run.row.spec.disk = [next, ...frozen]; },
      resumed: save,
    });
    run.hooks.step('freeze', pauseMs);
    return frozen;
  } catch (e) {
    if (!switched) rmSync(next, { force: true });
    // A row that cannot be written is no copy's fault: no stopped copy follows.
    if (saveFailed) throw saveFailed;
    throw e instanceof LiveCopyError ? e : new LiveCopyError(`the live copy failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  } finally {
    run.copying = false;
    // The VM writes to `next` once switched, whatever happened after.
    if (switched && !saved) await save();
  }
}

/** Stopped for the copy of the memory it uses (~0.5–0.8 ms per MiB here under QEMU), then let go on if it ran. */
export async function freezeStopped(run: FreezingRun, into: { ram: string; state: string }): Promise<string[]> {
  const vm = run.vm!;
  const { frozen, next } = await nextTop(run);
  const used = vm.usedMiB();
  const wasRunning = run.row.state === 'running';
  const t0 = performance.now();
  let stopped = false;
  let switched = false;
  try {
    if (wasRunning) { await vm.pause(); stopped = true; }
    await vm.snapshotDisk(next);
    switched = true;
    run.row.spec.disk = [next, ...frozen];
    await vm.save(into);
  } finally {
    if (stopped) await vm.resume();
    const ms = performance.now() - t0;
    run.hooks.step('freeze', ms);
    if (wasRunning) run.hooks.stoppedCopy(ms, used);
    if (switched) await run.hooks.save(run.row);
    else rmSync(next, { force: true });
  }
  return frozen;
}

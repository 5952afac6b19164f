import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { BackedUpMachine, MachineBackups, MachineFilesBackup } from '../core/backups.js';
import type { Deps } from '../core/deps.js';
import type { BlobStore } from '../store/blobs/types.js';
import type { MachineRow, MetadataStore, SnapshotRow, StoredFile, StoredMachineFiles } from '../store/metadata/types.js';
import type { Dialer } from '../util/dialer.js';
import { newId } from '../util/ids.js';
import { runOk } from '../util/proc.js';
import type { MachineLayout } from './layout.js';
import type { MachineRuns } from './runs.js';
import { MachineStowage } from './storage/stowage.js';

/**
 * Machines' files in a server backup: stored by the running server (each machine under its
 * lifecycle lock), put back by an offline restore (`restoreMachineFiles`), as blobs packed the way
 * cluster mode stows them.
 */
export function machineBackups(runs: MachineRuns, deps: Pick<Deps, 'metadata' | 'log' | 'dialer'>): MachineBackups {
  return {
    async store(target, machines, snapshots, progress) {
      const stowage = new MachineStowage(target, runs.layout, deps.log, deps.dialer);
      const out: MachineFilesBackup = { machines: [], snapshots: [], left: [] };
      // Synced first: a file whose blocks are not allocated yet looks sparse to tar (store/blobs/pack.ts).
      if (existsSync(runs.layout.root)) await runOk('sync', ['-f', runs.layout.root]);
      const total = machines.length + snapshots.length;
      let done = 0;
      for (const snap of snapshots) {
        try {
          const s = snap.spec;
          const disk = await stowage.storeDisk(s.disk[0], { frozenTop: true });
          out.snapshots.push({ id: snap.id, ram: await stowage.storeMemory(s.ram, 'ram'), deviceState: await stowage.storeMemory(s.state, 'state.bin'), disk });
        } catch (e) {
          if (await deps.metadata.machines.getSnapshot(snap.tenantId, snap.id)) throw e;
          out.left.push({ id: snap.id, why: 'deleted during the backup' });
        }
        progress?.(++done, total);
      }
      for (const row of machines) {
        const live = row.state === 'hibernated' || row.state === 'stopped' ? await deps.metadata.machines.find(row.id) : null;
        if (!live) {
          out.left.push({ id: row.id, why: row.state === 'hibernated' || row.state === 'stopped' ? 'deleted during the backup' : `${row.state}: a live machine's memory and disk are not in a backup (hibernate it first)` });
        } else {
          const run = runs.runOf(live);
          const state = row.state as BackedUpMachine['state'];
          const stored = await run.serial(async (): Promise<BackedUpMachine | null> => {
            if (run.row.state !== state) return null;
            const disk = await stowage.storeDisk(run.row.spec.disk[0]);
            const cold = state === 'hibernated' && existsSync(runs.layout.coldMarker(row.id));
            if (state === 'stopped' || cold) return { id: row.id, state, ...(cold ? { cold } : {}), disk };
            const saved = runs.layout.hibernation(row.id);
            return { id: row.id, state: 'hibernated', ram: await stowage.storeMemory(saved.ram, 'ram'), deviceState: await stowage.storeMemory(saved.state, 'state.bin'), disk };
          });
          if (stored) out.machines.push(stored);
          else out.left.push({ id: row.id, why: `${run.row.state} since the backup's point` });
        }
        progress?.(++done, total);
      }
      return out;
    },
  };
}

/**
 * Puts a backup's machine files into a restored home (no server running) and points the restored
 * rows at them: snapshots' and hibernated machines' memory where the layout keeps it, each disk
 * chain in the tenant's `disks/` (frozen files as `b-HEX`, shared by the chains that name them;
 * a machine's writable top under a name of its own). Rows whose files are not in the backup are
 * removed; their ids are returned.
 */
export async function restoreMachineFiles(source: BlobStore, layout: MachineLayout, md: MetadataStore, log: Logger, dialer: Dialer,
  files: Partial<MachineFilesBackup> | undefined): Promise<{ machines: string[]; snapshots: string[] }> {
  const stowage = new MachineStowage(source, layout, log, dialer);
  const machines = new Map((Array.isArray(files?.machines) ? files.machines : []).map((m) => [m.id, m]));
  const snapshots = new Map((Array.isArray(files?.snapshots) ? files.snapshots : []).map((s) => [s.id, s]));
  const removed = { machines: [] as string[], snapshots: [] as string[] };
  for (const snap of await md.machines.listSnapshots()) {
    const f = snapshots.get(snap.id);
    if (!f) {
      if (await md.machines.deleteSnapshot(snap.tenantId, snap.id)) removed.snapshots.push(snap.id);
      continue;
    }
    const dir = layout.snapshotDir(snap.tenantId, snap.id);
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    const at = layout.snapshotFiles(dir);
    const disk = await placeChain(stowage, layout, snap.tenantId, f.disk, null);
    await stowage.fetchFile(f.ram, at.ram);
    await stowage.fetchFile(f.deviceState, at.state);
    const row: SnapshotRow = { ...snap, spec: { ...snap.spec, disk, ram: at.ram, state: at.state } };
    await md.machines.deleteSnapshot(snap.tenantId, snap.id);
    await md.machines.createSnapshot(row);
  }
  for (const m of await md.machines.list()) {
    const f = machines.get(m.id);
    if (!f || f.state !== m.state) {
      if (await md.machines.delete(m.tenantId, m.id)) removed.machines.push(m.id);
      continue;
    }
    const disk = await placeChain(stowage, layout, m.tenantId, f.disk, m.id);
    if (f.state === 'hibernated') {
      const run = layout.runDir(m.id);
      mkdirSync(path.dirname(run), { recursive: true, mode: 0o711 });
      mkdirSync(run, { recursive: true, mode: 0o700 });
      if (f.cold || !f.ram || !f.deviceState) writeFileSync(layout.coldMarker(m.id), '');
      else {
        const saved = layout.hibernation(m.id);
        await stowage.fetchFile(f.ram, saved.ram);
        await stowage.fetchFile(f.deviceState, saved.state);
      }
    }
    const row: MachineRow = { ...m, spec: { ...m.spec, disk } };
    await md.machines.update(row);
  }
  return removed;
}

/** A stored chain (top first) in the tenant's `disks/`, each file rebased onto the one below; `owner`: the top is that machine's writable one. */
async function placeChain(stowage: MachineStowage, layout: MachineLayout, tenantId: string, chain: readonly StoredFile[], owner: string | null): Promise<string[]> {
  const dir = layout.disksDir(tenantId);
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  chmodSync(layout.tenantDir(tenantId), 0o711);
  const out: string[] = new Array<string>(chain.length);
  for (let i = chain.length - 1; i >= 0; i--) {
    const f = chain[i];
    const ext = f.name === 'disk.raw' ? 'raw' : 'qcow2';
    const file = i === 0 && owner ? layout.diskFile(tenantId, `${owner}-${newId('d')}`) : path.join(dir, `b-${f.digest.slice(7)}.${ext}`);
    if (!existsSync(file)) await stowage.fetchFile(f, file, out[i + 1]);
    out[i] = file;
  }
  return out;
}

/**
 * Stows hibernated machines' and snapshots' files into a cluster's object store (a migration from
 * an embedded server, offline), as a cluster's worker stows them on hibernation: by id, what each
 * row's `stored` becomes.
 */
export async function stowForCluster(blobs: BlobStore, layout: MachineLayout, log: Logger, dialer: Dialer,
  machines: readonly MachineRow[], snapshots: readonly SnapshotRow[]): Promise<Map<string, StoredMachineFiles>> {
  const stowage = new MachineStowage(blobs, layout, log, dialer);
  const out = new Map<string, StoredMachineFiles>();
  if (machines.length + snapshots.length === 0) return out;
  await runOk('sync', ['-f', layout.root]);
  for (const s of snapshots) out.set(s.id, await stowage.store({ ram: s.spec.ram, state: s.spec.state, disk: s.spec.disk }, { frozenTop: true }));
  for (const m of machines) out.set(m.id, await stowage.store({ ...layout.hibernation(m.id), disk: m.spec.disk }));
  return out;
}

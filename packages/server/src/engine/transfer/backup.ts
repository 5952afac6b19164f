import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { ShellbaseError } from '../../errors.js';
import type { Deps } from '../../core/deps.js';
import { packLayer } from '../../store/blobs/pack.js';
import type { BlobStore } from '../../store/blobs/types.js';
import { isImageLayer } from '../../store/layer-ids.js';
import { SqliteSnapshot } from '../../store/metadata/index.js';
import type { LayerRow } from '../../store/metadata/types.js';
import type { GarbageCollector } from '../gc.js';
import { eachAtOnce } from '../../util/at-once.js';
import type { MachineBackups, MachineFilesBackup } from '../../core/backups.js';
import {
  BACKUP_FORMAT, BACKUP_KIND, applyRetention, backupIds, layerDoc, manifestDoc, newBackupId, readManifest, startedDoc,
  type BackupBlob, type BackupLayer, type BackupManifest,
} from './backup-catalog.js';
import { transferOf } from './export.js';

export interface BackupOptions {
  /** Keep this many complete backups in the target (older ones and what only they name go). */
  keep?: number;
}

export interface BackupProgress {
  phase: 'metadata' | 'layers' | 'machines' | 'retention';
  done: number;
  total: number;
  /** Bytes stored in the target so far. */
  bytes: number;
}

export interface BackupResult {
  id: string;
  pointAt: string;
  layers: number;
  /** Layers the target lacked, stored now; the rest were there from earlier backups. */
  copied: number;
  /** Bytes stored in the target by this backup. */
  bytes: number;
  /** Machines and snapshots whose files are in the backup. */
  machines: number;
  snapshots: number;
  /** Those that are not, and why. */
  left?: { id: string; why: string }[];
  removed?: { backups: string[]; blobs: number };
}

/** How many layers are packed and stored at once. */
const LAYERS_AT_ONCE = 2;

/**
 * Backs the whole server up into `target` while it keeps serving (backup-catalog.ts has the
 * target's layout). The consistent point is the metadata store's online copy: taken with garbage
 * collection paused and every layer the copy names pinned before collection runs again, so what
 * the copy names stays on disk until it is stored. Layers the target already holds (a
 * `layers/ID.json` document names their blob) are not packed again. The manifest is written
 * last: a backup cut short at any point is incomplete and never restored from.
 */
export async function takeBackup(deps: Deps, gc: GarbageCollector, machineFiles: MachineBackups | null, target: BlobStore, opts: BackupOptions, progress: (p: BackupProgress) => void = () => undefined): Promise<BackupResult> {
  const transfer = transferOf(deps.snapshotter);
  const snapshotOf = deps.metadata.snapshot?.bind(deps.metadata);
  if (!snapshotOf || deps.cluster) {
    throw new ShellbaseError('failed_precondition', 'only an embedded server (SQLite and a local layer store) backs itself up', {
      hint: 'a cluster\'s state is in Postgres and its object store: back those up with their own tools (docs/operations.md, Backups)',
    });
  }
  const id = newBackupId();
  const startedAt = new Date().toISOString();
  await target.documents.put(startedDoc(id), Buffer.from(JSON.stringify({ kind: BACKUP_KIND, format: BACKUP_FORMAT, id, startedAt })));
  const tmp = path.join(deps.config.home, 'tmp');
  mkdirSync(tmp, { recursive: true });
  const work = await mkdtemp(path.join(tmp, 'backup-'));
  const hold = deps.pins.hold();
  let stored = 0;
  try {
    const metaDir = path.join(work, 'metadata');
    mkdirSync(metaDir);
    const dbFile = path.join(metaDir, 'meta.db');
    progress({ phase: 'metadata', done: 0, total: 1, bytes: 0 });
    const { pointAt, layers, images, machines, snapshots, counts, schema } = await gc.paused(async () => {
      await snapshotOf(dbFile);
      const pointAt = new Date().toISOString();
      const snap = new SqliteSnapshot(dbFile);
      try {
        const rows = await snap.versions.layers();
        // Pinned before collection runs again: no layer the copy names is deleted until it is stored.
        hold.layerIds(rows.map((r) => r.id));
        return {
          pointAt, schema: snap.schema, counts: await snap.counts(),
          layers: rows.filter((r) => !isImageLayer(r.id)), images: rows.filter((r) => isImageLayer(r.id)).map((r) => r.id),
          machines: await snap.machines.list(), snapshots: await snap.machines.listSnapshots(),
        };
      } finally {
        await snap.close();
      }
    });
    const adminKey = path.join(deps.config.home, 'admin.key');
    if (existsSync(adminKey)) copyFileSync(adminKey, path.join(metaDir, 'admin.key'));
    const meta = await target.put(packLayer(deps.dialer, metaDir));
    stored += meta.size;
    progress({ phase: 'metadata', done: 1, total: 1, bytes: stored });

    // The store synced first: a file whose blocks are not allocated yet (a commit whose own sync
    // has not finished) looks sparse to tar, which would pack holes for its data (pack.ts).
    await deps.snapshotter.sync();
    const have = await knownLayers(target, layers.map((l) => l.id));
    const out: BackupLayer[] = new Array<BackupLayer>(layers.length);
    let copied = 0;
    let done = 0;
    const one = async (i: number, row: LayerRow): Promise<void> => {
      let blob = have.get(row.id);
      if (!blob) {
        if (!transfer.has(row.id)) {
          throw new ShellbaseError('internal', `layer ${row.id} is named by the metadata but missing from the layer store`, { hint: 'run the server\'s start-up checks; the backup is left incomplete' });
        }
        const info = await target.put(transfer.exportLayer(row.id, { bytes: row.bytes }));
        blob = { digest: info.digest, size: info.size };
        await target.documents.put(layerDoc(row.id), Buffer.from(JSON.stringify(blob)));
        stored += info.size;
        copied++;
      }
      out[i] = { id: row.id, kind: row.kind as BackupLayer['kind'], bytes: row.bytes, digest: blob.digest, size: blob.size };
      progress({ phase: 'layers', done: ++done, total: layers.length, bytes: stored });
    };
    // Every call ends before a failure is answered: none still packs a layer whose pin is released.
    await eachAtOnce(layers, LAYERS_AT_ONCE, (row, i) => one(i, row));

    const files: MachineFilesBackup = machineFiles && (machines.length || snapshots.length)
      ? await machineFiles.store(target, machines, snapshots, (d, n) => progress({ phase: 'machines', done: d, total: n, bytes: stored }))
      : { machines: [], snapshots: [], left: [...machines, ...snapshots].map((m) => ({ id: m.id, why: 'machines are not on this server' })) };
    const manifest: BackupManifest = {
      kind: BACKUP_KIND, format: BACKUP_FORMAT, id, startedAt, pointAt, finishedAt: new Date().toISOString(),
      metadata: { digest: meta.digest, size: meta.size, schema }, layers: out, images, machines: files,
      totals: { ...counts, bytes: out.reduce((s, l) => s + l.bytes, 0) },
    };
    await target.documents.put(manifestDoc(id), Buffer.from(JSON.stringify(manifest)));
    const result: BackupResult = {
      id, pointAt, layers: out.length, copied, bytes: stored, machines: files.machines.length, snapshots: files.snapshots.length,
      ...(files.left.length ? { left: files.left } : {}),
    };
    if (opts.keep !== undefined) {
      progress({ phase: 'retention', done: 0, total: 1, bytes: stored });
      result.removed = await applyRetention(target, opts.keep);
      progress({ phase: 'retention', done: 1, total: 1, bytes: stored });
    }
    return result;
  } finally {
    hold.release();
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * Which blob holds each of `ids` that the target stored before: the newest complete backup's
 * manifest first (one read), then the layer documents of the rest (a backup cut short leaves
 * them for the next; a document is written only once its blob is stored), kept only where the
 * target still holds the blob.
 */
async function knownLayers(target: BlobStore, ids: readonly string[]): Promise<Map<string, BackupBlob>> {
  const known = new Map<string, BackupBlob>();
  const last = (await backupIds(target)).filter((b) => b.complete).pop();
  // A newest manifest that does not read teaches nothing: the layer documents still do.
  const manifest = last ? await readManifest(target, last.id).catch(() => null) : null;
  for (const l of manifest?.layers ?? []) known.set(l.id, { digest: l.digest, size: l.size });
  const wanted = new Set(ids.filter((id) => !known.has(id)).map(layerDoc));
  const names = (await target.documents.list('layers/')).filter((n) => wanted.has(n));
  await Promise.all(Array.from({ length: 8 }, async () => {
    for (let name = names.pop(); name !== undefined; name = names.pop()) {
      const doc = await target.documents.get(name);
      if (!doc) continue;
      try { known.set(name.slice('layers/'.length, -'.json'.length), JSON.parse(doc.toString()) as BackupBlob); } catch { /* damaged: the layer is stored again */ }
    }
  }));
  // Only blobs the target still holds are reused (one listing of it): a lost one is stored again.
  const held = new Set<string>();
  for (let after: string | undefined; ;) {
    const page = await target.list({ limit: 1000, ...(after ? { after } : {}) });
    for (const b of page) held.add(b.digest);
    if (page.length < 1000) break;
    after = page[page.length - 1].digest;
  }
  for (const [id, b] of known) if (!held.has(b.digest)) known.delete(id);
  return known;
}

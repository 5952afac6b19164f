import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ShellbaseError } from '../../errors.js';
import { LAYER_PACK_FORMAT } from '../../store/blobs/pack.js';
import type { BlobStore } from '../../store/blobs/types.js';
import { isImageLayer } from '../../store/layer-ids.js';
import type { SqliteSnapshot } from '../../store/metadata/index.js';
import { copyRows, countRows } from '../../store/metadata/postgres/copy-rows.js';
import type { PostgresMetadataStore } from '../../store/metadata/postgres/postgres-store.js';
import type { MachineRow, SnapshotRow, StoredMachineFiles } from '../../store/metadata/types.js';
import type { LayerTransfer } from '../../store/snapshotter/types.js';

/** The document in the cluster's blob store that says which embedded server was migrated into it (format 1). */
export const MIGRATION_DOC = 'migration.json';

export interface MigrateProgress {
  phase: 'layers' | 'machines' | 'metadata' | 'verify';
  done: number;
  total: number;
}

export interface MigrateResult {
  /** Rows copied, by table. */
  rows: Record<string, number>;
  /** Layers stored in the object store now (the rest were there from a run before). */
  layersCopied: number;
  layers: number;
  /** Hibernated machines and snapshots whose files went to the object store. */
  machines: number;
  snapshots: number;
  /** Machines left behind (their files cannot move: stopped, or hibernated without memory), and why. */
  left: { id: string; why: string }[];
}

export interface MigrateFrom {
  home: string;
  /** The home's metadata, read only. */
  metadata: SqliteSnapshot;
  layers: LayerTransfer & { sync(): Promise<void> };
  /** Stores machines' files in the object store as cluster mode keeps a hibernated machine's or a snapshot's. */
  machines(blobs: BlobStore, rows: readonly MachineRow[], snapshots: readonly SnapshotRow[]): Promise<Map<string, StoredMachineFiles>>;
}

/**
 * Moves an embedded server's data (its home, no server running) into a cluster's stores with the
 * same ids: each layer packed into the object store and recorded where workers look for it, the
 * hibernated machines' and snapshots' files stowed there, then every metadata row copied (an
 * upsert). Stores that already hold another server's data are refused; the same migration run
 * again (after a failure) copies only what is missing and converges. Verified at the end: every
 * table's rows counted on both sides, every layer's blob present.
 */
export async function migrateHome(from: MigrateFrom, to: { metadata: PostgresMetadataStore; blobs: BlobStore },
  progress: (p: MigrateProgress) => void = () => undefined): Promise<MigrateResult> {
  const source = sourceId(from.home);
  const marker = await to.blobs.documents.get(MIGRATION_DOC);
  const previous = marker ? (JSON.parse(marker.toString()) as { source?: string }).source : null;
  const tenants = Number((await to.metadata.db.get<{ n: string }>('SELECT COUNT(*) AS n FROM tenants'))?.n ?? 0);
  if ((previous && previous !== source) || (!previous && tenants > 0)) {
    throw new ShellbaseError('failed_precondition', 'the cluster\'s stores already hold another server\'s data; nothing was copied', {
      hint: 'migrate into an empty Postgres database and an empty bucket prefix',
    });
  }
  await to.metadata.cluster.ready;
  // Run again, a migration converges on the source; once a worker has served the data, that would
  // take the cluster's own changes back (heads, keys, counters).
  const workers = Number((await to.metadata.db.get<{ n: string }>('SELECT COUNT(*) AS n FROM cluster_workers'))?.n ?? 0);
  const layers = (await from.metadata.versions.layers()).filter((l) => !isImageLayer(l.id));
  const ours = new Set(layers.map((l) => l.id));
  const recorded = await to.metadata.db.all<{ layer_id: string }>('SELECT layer_id FROM cluster_layer_blobs');
  if (workers > 0 || recorded.some((r) => !ours.has(r.layer_id))) {
    throw new ShellbaseError('failed_precondition', 'the cluster already serves this data (a worker has run on it): migrating again would take its changes back; nothing was copied', {
      hint: 'the migration is done; start workers on these stores',
    });
  }
  await to.blobs.documents.put(MIGRATION_DOC, Buffer.from(JSON.stringify({ kind: 'shellbase.migration', format: 1, source, startedAt: new Date().toISOString() })));

  // Layers: what workers fetch, recorded before the rows that name them (the store synced first:
  // a file whose blocks are not allocated yet looks sparse to tar, pack.ts).
  await from.layers.sync();
  const known = await to.metadata.cluster.blobsOf(layers.map((l) => l.id));
  let layersCopied = 0;
  for (const [i, l] of layers.entries()) {
    if (!known.has(l.id)) {
      const info = await to.blobs.put(from.layers.exportLayer(l.id, { bytes: l.bytes }));
      await to.metadata.cluster.recordBlob({ layerId: l.id, digest: info.digest, size: info.size, format: LAYER_PACK_FORMAT });
      layersCopied++;
    }
    progress({ phase: 'layers', done: i + 1, total: layers.length });
  }

  // Machines: hibernated ones with their memory and snapshots move; the rest stay behind, named.
  const machineRows = await from.metadata.machines.list();
  const snapshotRows = await from.metadata.machines.listSnapshots();
  const left: MigrateResult['left'] = [];
  const movable = machineRows.filter((m) => {
    const ok = m.state === 'hibernated' && !existsSync(path.join(from.home, 'machines', 'run', m.id, 'cold'));
    if (!ok) left.push({ id: m.id, why: m.state === 'hibernated' ? 'hibernated without its memory' : m.state });
    return ok;
  });
  progress({ phase: 'machines', done: 0, total: movable.length + snapshotRows.length });
  const stored = await from.machines(to.blobs, movable, snapshotRows);
  for (const [id, files] of stored) await to.metadata.cluster.holdMachineBlobs(id, [...new Set([files.ram.digest, files.state.digest, ...files.disk.map((d) => d.digest)])]);
  progress({ phase: 'machines', done: stored.size, total: movable.length + snapshotRows.length });

  const gone = new Set(left.map((l) => l.id));
  const withStored = (row: Record<string, unknown>) => {
    const files = stored.get(row.id as string);
    if (!files) return null;
    return { ...row, spec: JSON.stringify({ ...(JSON.parse(row.spec as string) as object), stored: files }) };
  };
  const rows = await copyRows(from.metadata.db, to.metadata.db, {
    rewrite: (table, row) => {
      if (table === 'machines' || table === 'machine_snapshots') return withStored(row);
      if (table === 'machine_ports' && gone.has(row.machine_id as string)) return null;
      return row;
    },
    progress: (table, n) => progress({ phase: 'metadata', done: n, total: 0, ...{ table } }),
  });

  // Verify: every table's rows, and every layer's blob.
  const theirs = await countRows(to.metadata.db, Object.keys(rows));
  const differ = Object.keys(rows).filter((t) => theirs[t] !== rows[t]);
  if (differ.length) {
    throw new ShellbaseError('internal', `after the copy, the cluster's ${differ.map((t) => `${t} has ${theirs[t]} rows (${rows[t]} copied)`).join(', ')}`, {
      hint: 'the source changed during the migration, or the target holds rows of its own: migrate with the server stopped, into empty stores',
    });
  }
  const blobs = await to.metadata.cluster.blobsOf(layers.map((l) => l.id));
  for (const [i, l] of layers.entries()) {
    const b = blobs.get(l.id);
    if (!b || !(await to.blobs.stat(b.digest))) throw new ShellbaseError('internal', `layer ${l.id}'s blob is missing from the object store after the copy`, { hint: 'run the migration again' });
    progress({ phase: 'verify', done: i + 1, total: layers.length });
  }
  await to.blobs.documents.put(MIGRATION_DOC, Buffer.from(JSON.stringify({ kind: 'shellbase.migration', format: 1, source, finishedAt: new Date().toISOString() })));
  return { rows, layersCopied, layers: layers.length, machines: [...stored.keys()].filter((id) => movable.some((m) => m.id === id)).length, snapshots: [...stored.keys()].filter((id) => snapshotRows.some((s) => s.id === id)).length, left };
}

/** This home's identity for migrations (made on the first one): what tells its data from another server's. */
function sourceId(home: string): string {
  const file = path.join(home, 'migration-id');
  if (!existsSync(file)) writeFileSync(file, `${randomBytes(16).toString('hex')}\n`, { mode: 0o600 });
  return readFileSync(file, 'utf8').trim();
}

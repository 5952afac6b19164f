import { chmodSync, existsSync, mkdirSync, renameSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { pipeline, type Readable } from 'node:stream';
import { ShellbaseError } from '../../errors.js';
import { eachAtOnce } from '../../util/at-once.js';
import { unpackLayer } from '../../store/blobs/pack.js';
import type { BlobStore } from '../../store/blobs/types.js';
import { SCHEMA_VERSION, SqliteMetadataStore } from '../../store/metadata/index.js';
import type { LayerTransfer } from '../../store/snapshotter/types.js';
import type { Dialer } from '../../util/dialer.js';
import { checked, damaged, partsOf, readManifest, verifyParts, type BackupBlob } from './backup-catalog.js';
import type { MachineFilesBackup } from '../../core/backups.js';
import type { MetadataStore } from '../../store/metadata/types.js';

export interface RestoreOptions {
  /** That backup; the newest complete one without it. */
  id?: string;
}

export interface RestoreProgress {
  phase: 'check' | 'metadata' | 'layers' | 'machines';
  done: number;
  total: number;
}

export interface RestoreResult {
  id: string;
  pointAt: string;
  tenants: number;
  contexts: number;
  versions: number;
  layers: number;
  /** Machines and snapshots whose rows the restore removed: their files are not in the backup. */
  removed: { machines: string[]; snapshots: string[] };
}

/** Where a restore writes: an empty home's layer store (opened by the caller) and its directory. */
export interface RestoreInto {
  home: string;
  layers: LayerTransfer & { remove(layerIds: readonly string[]): Promise<void>; sync(): Promise<void> };
  dialer: Dialer;
  /**
   * Puts the backup's machine files in place and points the restored rows at them, removing the
   * rows of those not in the backup (their ids returned); files it made are under the home's
   * `machines/`, which a failed restore removes.
   */
  machines(md: MetadataStore, files: MachineFilesBackup): Promise<{ machines: string[]; snapshots: string[] }>;
}

const LAYERS_AT_ONCE = 3;

/**
 * Restores a backup (backup-catalog.ts) into an empty home, with no server running over it. The
 * manifest is read and every part's presence checked before anything is written; each part is
 * checked against its digest as it streams in, and a layer is kept only once it matched. The
 * metadata goes into place last (`meta.db` is what makes a home a server's): a restore that
 * fails, at any point, removes the layers it made and leaves the home as empty as it found it.
 */
export async function restoreHome(source: BlobStore, into: RestoreInto, opts: RestoreOptions, progress: (p: RestoreProgress) => void = () => undefined): Promise<RestoreResult> {
  const metaFile = path.join(into.home, 'meta.db');
  if (existsSync(metaFile)) {
    throw new ShellbaseError('failed_precondition', `the home ${into.home} is not empty (it has meta.db): a backup is restored only into an empty home`, {
      hint: 'point SHELLBASE_HOME at a new directory, or move this one away first',
    });
  }
  const m = await readManifest(source, opts.id);
  if (m.metadata.schema > SCHEMA_VERSION) {
    throw new ShellbaseError('failed_precondition', `backup ${m.id} holds metadata of schema ${m.metadata.schema}; this server knows ${SCHEMA_VERSION}`, {
      hint: 'restore it with the shellbase version that took it, or a newer one',
    });
  }
  const parts = partsOf(m);
  let checkedParts = 0;
  for (const { name, blob } of parts) {
    const info = await source.stat(blob.digest);
    if (!info) {
      throw new ShellbaseError('failed_precondition', `the backup's ${name} is missing from the target (${blob.digest}); nothing was restored`, {
        details: { part: name, digest: blob.digest }, hint: 'restore another backup (`shellbase backup ls`), and check the target with `shellbase backup verify`',
      });
    }
    if (blob.size >= 0 && info.size !== blob.size) throw damaged(name, blob.digest);
    progress({ phase: 'check', done: ++checkedParts, total: parts.length });
  }

  const tmp = path.join(into.home, 'tmp');
  // What a failed restore removes of the home's machines: their directory, when it made it.
  const machinesDir = path.join(into.home, 'machines');
  const hadMachines = existsSync(machinesDir);
  mkdirSync(tmp, { recursive: true });
  const work = await mkdtemp(path.join(tmp, 'restore-'));
  const made: string[] = [];
  try {
    progress({ phase: 'metadata', done: 0, total: 1 });
    const metaDir = path.join(work, 'metadata');
    mkdirSync(metaDir);
    await unpackChecked(source, 'metadata', m.metadata, (s) => unpackLayer(into.dialer, s, metaDir));
    const db = path.join(metaDir, 'meta.db');
    if (!existsSync(db)) throw damaged('metadata', m.metadata.digest);
    progress({ phase: 'metadata', done: 1, total: 1 });

    let done = 0;
    // Each layer is written out while the next unpacks (one sync at a time), not all at the end.
    let flushing: Promise<void> = Promise.resolve();
    const flush = () => { flushing = flushing.then(() => into.layers.sync()).catch(() => undefined); };
    // Every call ends before a failure is answered: none is still making a layer the cleanup misses.
    await eachAtOnce(m.layers, LAYERS_AT_ONCE, async (l) => {
      if (!into.layers.has(l.id)) {
        const local = source.localPath?.(l.digest);
        if (local) await unpackLocal(`layer ${l.id}`, l, () => into.layers.importLayer(l.id, { path: local, digest: l.digest }));
        else await unpackChecked(source, `layer ${l.id}`, l, (s) => into.layers.importLayer(l.id, s));
        made.push(l.id);
        flush();
      }
      progress({ phase: 'layers', done: ++done, total: m.layers.length });
    });
    await flushing;
    await into.layers.sync();

    // Machines' files: each blob checked whole first (they are unpacked by path, not streamed through a check).
    const machineParts = parts.filter((p) => p.name !== 'metadata' && !p.name.startsWith('layer '));
    progress({ phase: 'machines', done: 0, total: machineParts.length });
    const bad = await verifyParts(source, machineParts, (d, n) => progress({ phase: 'machines', done: d, total: n }));
    if (bad.length) {
      throw new ShellbaseError('failed_precondition', `the backup's ${bad[0].part} is ${bad[0].problem} (${bad[0].digest}); nothing was restored`, {
        details: { part: bad[0].part, digest: bad[0].digest }, hint: 'restore another backup (`shellbase backup ls`), and check the target with `shellbase backup verify`',
      });
    }
    const md = new SqliteMetadataStore(db);
    let removed = { machines: [] as string[], snapshots: [] as string[] };
    let counts = { tenants: 0, contexts: 0, versions: 0 };
    try {
      removed = await into.machines(md, m.machines);
      counts = { tenants: (await md.tenants.list()).length, contexts: m.totals.contexts, versions: m.totals.versions };
    } finally {
      await md.close();
    }
    const key = path.join(metaDir, 'admin.key');
    if (existsSync(key)) {
      chmodSync(key, 0o600);
      renameSync(key, path.join(into.home, 'admin.key'));
    }
    // What SQLite kept beside the file (nothing, once its last connection closed), then the file.
    for (const f of ['-wal', '-shm']) if (existsSync(db + f)) renameSync(db + f, metaFile + f);
    chmodSync(db, 0o600);
    renameSync(db, metaFile);
    return { id: m.id, pointAt: m.pointAt, ...counts, layers: m.layers.length, removed };
  } catch (e) {
    await into.layers.remove(made).catch(() => undefined);
    if (!hadMachines) await rm(machinesDir, { recursive: true, force: true });
    throw e;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * One part unpacked by a program that reads its file itself (a backup in a directory of this
 * host) and checks its digest before unpacking any of it: a failure names the part.
 */
async function unpackLocal(part: string, blob: BackupBlob, use: () => Promise<unknown>): Promise<void> {
  try {
    await use();
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === 'digest_mismatch' || code === 'not_found') throw damaged(part, blob.digest);
    if (e instanceof ShellbaseError) throw e;
    throw new ShellbaseError('failed_precondition', `restoring the backup's ${part} failed: ${(e as Error).message}; nothing was restored`, {
      details: { part, digest: blob.digest }, hint: 'check the target with `shellbase backup verify`, or restore another backup',
    });
  }
}

/** Streams one part into `use`, failing with the part named when its bytes are not the manifest's. */
async function unpackChecked(source: BlobStore, part: string, blob: BackupBlob, use: (s: Readable) => Promise<unknown>): Promise<void> {
  const check = checked(part, blob);
  let mismatch = false;
  check.on('error', (e) => { if ((e as ShellbaseError).code === 'failed_precondition') mismatch = true; });
  const body = pipeline(await source.get(blob.digest), check, () => undefined);
  try {
    await use(body);
  } catch (e) {
    if (mismatch || e instanceof ShellbaseError) throw mismatch ? damaged(part, blob.digest) : e;
    // A pack whose own checksums fail (zstd) ends before the digest is known: the part is named either way.
    throw new ShellbaseError('failed_precondition', `restoring the backup's ${part} failed: ${(e as Error).message}; nothing was restored`, {
      details: { part, digest: blob.digest }, hint: 'check the target with `shellbase backup verify`, or restore another backup',
    });
  }
  if (mismatch) throw damaged(part, blob.digest);
}

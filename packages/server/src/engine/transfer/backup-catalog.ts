import { createHash, randomBytes } from 'node:crypto';
import { Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ShellbaseError, invalid } from '../../errors.js';
import { DIGEST, type BlobStore } from '../../store/blobs/types.js';
import type { MachineFilesBackup } from '../../core/backups.js';

/**
 * A backup target (docs/formats.md, "Server backup"): a blob store (a directory or an S3 prefix)
 * holding, as blobs, every part of every backup (the metadata, each layer once, machines' files),
 * and, as documents:
 * - `backups/ID/started.json`, written first;
 * - `backups/ID/manifest.json` (a `BackupManifest`), written last: a backup without it is
 *   incomplete and nothing restores from it;
 * - `layers/LAYER.json` (`{digest, size}`): which blob holds a layer, written once the blob is
 *   stored, so the next backup copies only layers the target lacks.
 */
export const BACKUP_FORMAT = 1;
export const BACKUP_KIND = 'shellbase.backup';

export interface BackupBlob {
  digest: string;
  /** Bytes of the blob; -1 where the manifest does not record it (machines' files: their digest is the check). */
  size: number;
}

export interface BackupLayer extends BackupBlob {
  id: string;
  kind: 'exec' | 'squash' | 'import';
  /** Bytes of file data in the layer. */
  bytes: number;
}

export interface BackupManifest {
  kind: typeof BACKUP_KIND;
  format: typeof BACKUP_FORMAT;
  id: string;
  startedAt: string;
  /** The moment the metadata was copied: what a restore brings back. */
  pointAt: string;
  finishedAt: string;
  /** The metadata store as of `pointAt` (a packed tree: `meta.db`, and `admin.key` where the server had one). */
  metadata: BackupBlob & { schema: number };
  /** Every layer the metadata names, built-in images' excepted. */
  layers: BackupLayer[];
  /** Built-in images' layers the metadata names: not carried (every server builds its images). */
  images: string[];
  /** Machines' and snapshots' files (hibernated and stopped machines, snapshots), and those of the metadata that are not in the backup. */
  machines: MachineFilesBackup;
  totals: { tenants: number; contexts: number; versions: number; bytes: number };
}

export interface BackupListing {
  id: string;
  complete: boolean;
  startedAt: string | null;
  finishedAt: string | null;
  /** Blobs' bytes the backup names (shared ones counted in each backup). */
  bytes: number;
  layers: number;
}

/** What a layer id may be (store/layer-ids.ts spells them): it becomes a directory's name at restore. */
const LAYER_ID = /^[A-Za-z0-9_-]{1,128}$/;
/** The names machines' files have in their packs (machines/storage/stowage.ts). */
const FILE_NAMES = ['disk.qcow2', 'disk.raw', 'ram', 'state.bin'];

export const startedDoc = (id: string): string => `backups/${id}/started.json`;
export const manifestDoc = (id: string): string => `backups/${id}/manifest.json`;
export const layerDoc = (layerId: string): string => `layers/${layerId}.json`;

/** A new backup's id: the time it started (ids sort as backups were taken), then a random tag. */
export function newBackupId(now = new Date()): string {
  // 20261204T235959.123Z: to the millisecond (a server takes one backup at a time).
  return `${now.toISOString().replace(/[-:]/g, '')}-${randomBytes(3).toString('hex')}`;
}

/** The backups a target holds, oldest first, by their documents' names alone (complete: it has its manifest). */
export async function backupIds(blobs: BlobStore): Promise<{ id: string; complete: boolean }[]> {
  const byId = new Map<string, boolean>();
  for (const n of await blobs.documents.list('backups/')) {
    const [, id, doc] = n.split('/');
    byId.set(id, (byId.get(id) ?? false) || doc === 'manifest.json');
  }
  return [...byId].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, complete]) => ({ id, complete }));
}

/** The backups a target holds, oldest first, with what each holds. */
export async function listBackups(blobs: BlobStore): Promise<BackupListing[]> {
  const out: BackupListing[] = [];
  for (const { id, complete } of await backupIds(blobs)) {
    const m = complete ? await readManifest(blobs, id).catch(() => null) : null;
    const started = m ? null : await blobs.documents.get(startedDoc(id));
    out.push({
      // A manifest that does not read is no complete backup (verify names the damage).
      id, complete: m !== null,
      startedAt: m?.startedAt ?? (started ? (JSON.parse(started.toString()) as { startedAt?: string }).startedAt ?? null : null),
      finishedAt: m?.finishedAt ?? null,
      bytes: m ? m.metadata.size + m.layers.reduce((s, l) => s + l.size, 0) : 0,
      layers: m?.layers.length ?? 0,
    });
  }
  return out;
}

/** A backup's manifest (the newest complete one without `id`); refuses an incomplete or unknown backup, naming it. */
export async function readManifest(blobs: BlobStore, id?: string): Promise<BackupManifest> {
  if (id === undefined) {
    const complete = (await backupIds(blobs)).filter((b) => b.complete);
    if (complete.length === 0) throw new ShellbaseError('not_found', 'the target holds no complete backup', { hint: 'take one with `shellbase backup --to …`' });
    id = complete[complete.length - 1].id;
  }
  if (!/^[A-Za-z0-9._-]+$/.test(id)) throw invalid(`not a backup id: ${JSON.stringify(id)}`, 'list them with `shellbase backup ls`');
  const body = await blobs.documents.get(manifestDoc(id));
  if (!body) {
    if (await blobs.documents.get(startedDoc(id))) {
      throw new ShellbaseError('failed_precondition', `backup ${id} is incomplete (it never finished) and is never restored from`, { hint: 'restore another backup, or take a new one' });
    }
    throw new ShellbaseError('not_found', `no backup ${id} in the target`, { hint: 'list them with `shellbase backup ls`' });
  }
  let m: BackupManifest;
  try { m = JSON.parse(body.toString()) as BackupManifest; } catch {
    throw invalid(`backup ${id}: its manifest is not JSON (damaged)`, 'restore another backup');
  }
  if (m.kind !== BACKUP_KIND) throw invalid(`backup ${id}: its manifest is not a shellbase backup's`, 'restore another backup');
  if (m.format !== BACKUP_FORMAT) {
    throw new ShellbaseError('failed_precondition', `backup ${id} is in format ${String(m.format)}; this server reads format ${BACKUP_FORMAT}`, { hint: 'restore it with the shellbase version that took it, or a newer one' });
  }
  // What restore turns into paths and rows: checked before anything is read.
  const bad = () => invalid(`backup ${id}: its manifest is malformed`, 'restore another backup');
  if (!m.metadata || !Array.isArray(m.layers) || !m.machines || !Array.isArray(m.machines.machines) || !Array.isArray(m.machines.snapshots)) throw bad();
  for (const b of [m.metadata, ...m.layers]) if (!b || typeof b.digest !== 'string' || !DIGEST.test(b.digest) || !Number.isSafeInteger(b.size)) throw bad();
  for (const l of m.layers) if (typeof l.id !== 'string' || !LAYER_ID.test(l.id) || !['exec', 'squash', 'import'].includes(l.kind)) throw bad();
  for (const x of [...m.machines.machines, ...m.machines.snapshots]) {
    if (!x || typeof x.id !== 'string' || !/^[ms]_[a-z0-9]{1,64}$/.test(x.id) || !Array.isArray(x.disk)) throw bad();
    for (const f of [x.ram, 'deviceState' in x ? x.deviceState : undefined, ...x.disk]) {
      if (f !== undefined && (typeof f.digest !== 'string' || !DIGEST.test(f.digest) || !FILE_NAMES.includes(f.name))) throw bad();
    }
  }
  return m;
}

/** The blobs a backup is made of, each named for people. */
export function partsOf(m: BackupManifest): { name: string; blob: BackupBlob }[] {
  const machineParts: { name: string; blob: BackupBlob }[] = [];
  const file = (owner: string, f: { digest: string; name: string } | undefined) => {
    if (f && !machineParts.some((p) => p.blob.digest === f.digest)) machineParts.push({ name: `${owner}'s ${f.name}`, blob: { digest: f.digest, size: -1 } });
  };
  for (const x of [...(m.machines.machines ?? []), ...(m.machines.snapshots ?? [])]) {
    if (typeof x !== 'object') continue;
    file(x.id, x.ram);
    file(x.id, x.deviceState);
    for (const d of x.disk) file(x.id, d);
  }
  return [{ name: 'metadata', blob: m.metadata }, ...m.layers.map((l) => ({ name: `layer ${l.id}`, blob: l as BackupBlob })), ...machineParts];
}

export interface Damage {
  part: string;
  digest: string;
  problem: 'missing' | 'damaged';
}

/** Reads every blob of a backup whole and checks its digest and size: the parts that are missing or damaged. */
export function verifyBackup(blobs: BlobStore, m: BackupManifest, progress: (done: number, total: number) => void = () => undefined): Promise<Damage[]> {
  return verifyParts(blobs, partsOf(m), progress);
}

/** Reads each part whole and checks its digest (and its size, where recorded). */
export async function verifyParts(blobs: BlobStore, parts: { name: string; blob: BackupBlob }[], progress: (done: number, total: number) => void = () => undefined): Promise<Damage[]> {
  const damage: Damage[] = [];
  let done = 0;
  for (const { name, blob } of parts) {
    try {
      const hash = createHash('sha256');
      let size = 0;
      await pipeline(await blobs.get(blob.digest), new Writable({ write(c: Buffer, _e, cb) { hash.update(c); size += c.length; cb(); } }));
      if (`sha256:${hash.digest('hex')}` !== blob.digest || (blob.size >= 0 && size !== blob.size)) damage.push({ part: name, digest: blob.digest, problem: 'damaged' });
    } catch (e) {
      if ((e as { code?: string }).code !== 'not_found') throw e;
      damage.push({ part: name, digest: blob.digest, problem: 'missing' });
    }
    progress(++done, parts.length);
  }
  return damage;
}

/** Passes bytes through and fails at their end, naming `part`, when they are not the blob the manifest names. */
export function checked(part: string, blob: BackupBlob): Transform {
  const hash = createHash('sha256');
  let size = 0;
  return new Transform({
    transform(c: Buffer, _e, done) { hash.update(c); size += c.length; done(null, c); },
    flush(done) {
      const digest = `sha256:${hash.digest('hex')}`;
      done(digest === blob.digest && (blob.size < 0 || size === blob.size) ? null : damaged(part, blob.digest));
    },
  });
}

export function damaged(part: string, digest: string): ShellbaseError {
  return new ShellbaseError('failed_precondition', `the backup's ${part} is damaged (its bytes are not ${digest}); nothing was restored`, {
    details: { part, digest }, hint: 'restore another backup (`shellbase backup ls`), and check the target with `shellbase backup verify`',
  });
}

/**
 * Keeps the newest `keep` complete backups: older manifests go, incomplete backups older than the
 * newest complete one go, then every blob and layer document no kept backup names. Only while
 * no other backup to the target is running (the server takes one at a time).
 */
export async function applyRetention(blobs: BlobStore, keep: number): Promise<{ backups: string[]; blobs: number }> {
  const all = await backupIds(blobs);
  const complete = all.filter((b) => b.complete);
  if (complete.length === 0) return { backups: [], blobs: 0 };
  const newest = complete[complete.length - 1].id;
  const gone = [...complete.slice(0, Math.max(0, complete.length - keep)), ...all.filter((b) => !b.complete && b.id < newest)].map((b) => b.id);
  for (const id of gone) {
    await blobs.documents.delete(manifestDoc(id));
    await blobs.documents.delete(startedDoc(id));
  }
  if (gone.length === 0) return { backups: [], blobs: 0 };
  const live = new Set<string>();
  for (const b of complete.filter((c) => !gone.includes(c.id))) for (const { blob } of partsOf(await readManifest(blobs, b.id))) live.add(blob.digest);
  for (const name of await blobs.documents.list('layers/')) {
    const doc = await blobs.documents.get(name);
    let digest: string | null = null;
    try { digest = doc ? (JSON.parse(doc.toString()) as BackupBlob).digest : null; } catch { /* damaged: it goes */ }
    if (!digest || !live.has(digest)) await blobs.documents.delete(name);
  }
  let deleted = 0;
  let after: string | undefined;
  for (;;) {
    const page = await blobs.list({ limit: 1000, ...(after ? { after } : {}) });
    if (page.length === 0) break;
    for (const b of page) if (!live.has(b.digest) && (await blobs.delete(b.digest))) deleted++;
    after = page[page.length - 1].digest;
  }
  return { backups: gone, blobs: deleted };
}

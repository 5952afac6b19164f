import { createHash } from 'node:crypto';
import { PassThrough, type Readable } from 'node:stream';
import { ShellbaseError, invalid, notFound } from '../../errors.js';
import { SYSTEM_TENANT, type Caller, type Deps } from '../../core/deps.js';
import { checkName } from '../../core/validate.js';
import { imageVersionId, isImageLayer, isImportedLayer, parseImageLayer } from '../../store/layer-ids.js';
import type { Meter } from '../../meter/types.js';
import { written, type ByteSink } from '../../util/sink.js';
import type { VersionRow } from '../../store/metadata/types.js';
import type { LayerTransfer, Snapshotter } from '../../store/snapshotter/types.js';
import { TAR_END, tarPadding } from '../../util/tar.js';
import { SMALL_TREE } from '../../store/blobs/pack.js';
import { ARCHIVE_KIND, CONTEXT_ARCHIVE_FORMAT, MANIFEST, PIECE_BYTES, SUMS, pieceEntry, piecePrefix, tarHeader, type Manifest, type ManifestVersion } from './format.js';
import { sendLayer } from './send.js';

export interface ExportOptions {
  /** That version (and its layers) instead of the head. */
  version?: string;
  /** Every version reachable from the head (over parents and merges). */
  history?: boolean;
}

/** An export, not yet written: as a stream, or into a sink (the HTTP route's, which may offer its connection to send.ts). */
export interface ContextArchive {
  stream(): Readable;
  writeTo(sink: ByteSink): Promise<void>;
}

/** The snapshotter's layer packing, or failed_precondition where it has none (the memory store, a cluster's cache). */
export function transferOf(s: Snapshotter): LayerTransfer {
  const t = s as Partial<LayerTransfer>;
  if (typeof t.exportLayer !== 'function' || typeof t.importLayer !== 'function') {
    throw new ShellbaseError('failed_precondition', 'this server\'s layer store cannot pack layers, so contexts cannot be exported or imported here', {
      hint: 'export and import on an embedded server (btrfs layer store)',
    });
  }
  return t as LayerTransfer;
}

/** A version the caller may read, by id (the engine's lookup). */
export type VersionOf = (caller: Caller, id: string) => Promise<VersionRow>;

/**
 * A context's versions as an archive (format.ts). What it names is read first (a missing context
 * or version fails before a byte is sent); when the archive is written, layers are packed one at
 * a time and sent in pieces as they are packed (at most `PIECE_BYTES` held, two where a helper
 * sends them), so the archive is never held whole, in memory or on disk. A failure while writing
 * cuts the archive short, which an import refuses.
 */
export async function exportContext(deps: Deps, versionOf: VersionOf, caller: Caller, name: string, opts: ExportOptions): Promise<ContextArchive> {
  const transfer = transferOf(deps.snapshotter);
  checkName(name);
  if (opts.version !== undefined && opts.history) throw invalid('pass a version or history, not both', 'drop one of them');
  const ctx = await deps.metadata.contexts.get(caller.tenantId, name);
  if (!ctx) throw notFound('context', name);
  const top = await versionOf(caller, opts.version ?? ctx.head);

  const chosen = new Map<string, VersionRow>();
  const queue = [top];
  while (queue.length > 0) {
    const v = queue.pop()!;
    if (chosen.has(v.id) || v.tenantId === SYSTEM_TENANT) continue;
    chosen.set(v.id, v);
    if (!opts.history) continue;
    for (const p of [v.parent, v.merged]) if (p && !chosen.has(p)) queue.push(await versionOf(caller, p));
  }
  const versions = [...chosen.values()].sort((a, b) => a.depth - b.depth || a.createdAt.localeCompare(b.createdAt));

  const images = new Map<string, Manifest['images'][number]>();
  const layerIds: string[] = [];
  for (const v of versions) {
    for (const l of v.layers) {
      const image = parseImageLayer(l);
      if (image) images.set(l, { name: image.name, version: imageVersionId(image.name, image.tag), layer: l });
      else if (!isImageLayer(l) && !layerIds.includes(l)) layerIds.push(l);
    }
  }
  const imageVersions = new Set([...images.values()].map((i) => i.version));
  const kept = (p: string | null | undefined): string | null => (p && (chosen.has(p) || imageVersions.has(p)) ? p : null);
  const mv: ManifestVersion[] = [];
  for (const v of versions) {
    const parent = kept(v.parent);
    mv.push({
      id: v.id, parent, merged: kept(v.merged), createdAt: v.createdAt, cause: v.cause, bytes: v.bytes, layers: v.layers,
      changes: parent === v.parent ? await deps.metadata.versions.changes(v.id) : null,
    });
  }
  const manifest: Manifest = {
    kind: ARCHIVE_KIND, format: CONTEXT_ARCHIVE_FORMAT, createdAt: new Date().toISOString(),
    context: {
      name: ctx.name, image: ctx.image, head: top.id,
      ...(ctx.defaults ? { defaults: ctx.defaults } : {}), ...(ctx.config ? { config: ctx.config } : {}), ...(ctx.network ? { network: ctx.network } : {}),
    },
    images: [...images.values()],
    layers: await Promise.all(layerIds.map(async (id) => ({
      id, kind: isImportedLayer(id) ? 'import' as const : 'exec' as const, bytes: await deps.metadata.versions.layerBytes([id]),
    }))),
    versions: mv,
  };
  // Synced first: a file whose blocks are not allocated yet looks sparse to tar (pack.ts).
  await deps.snapshotter.sync();
  return {
    writeTo: (sink) => writeArchive(transfer, manifest, sink, deps.meter),
    stream() {
      const out = new PassThrough();
      const sink: ByteSink = { write: (bytes) => written(out, out.write(bytes)) };
      writeArchive(transfer, manifest, sink, deps.meter).then(() => out.end(), (e: unknown) => out.destroy(e as Error));
      return out;
    },
  };
}

async function writeArchive(transfer: LayerTransfer, manifest: Manifest, sink: ByteSink, meter: Meter): Promise<void> {
  const now = Math.floor(Date.now() / 1000);
  const sums: string[] = [];
  const entry = async (name: string, data: Buffer[], bytes: number) => {
    await sink.write(tarHeader(name, bytes, now));
    for (const d of data) await sink.write(d);
    await sink.write(tarPadding(bytes));
  };
  const body = Buffer.from(JSON.stringify(manifest));
  sums.push(`${createHash('sha256').update(body).digest('hex')}  ${MANIFEST}`);
  await entry(MANIFEST, [body], body.length);
  for (const layer of manifest.layers) {
    // A large layer goes straight from its packer into the client's connection, where there is one.
    if (sink.connection && transfer.packProgram && layer.bytes >= SMALL_TREE) {
      const sent = await sendLayer(sink.connection, piecePrefix(layer.id), transfer.packProgram(layer.id), now, PIECE_BYTES);
      if (sent) { sums.push(...sent); meter.archiveLayer('helper'); continue; }
    }
    // Each piece goes out as soon as it is full (hashed as its bytes come): packing and sending overlap.
    let held: Buffer[] = [];
    let bytes = 0;
    let hash = createHash('sha256');
    let piece = 0;
    const flush = async () => {
      const [data, n, name] = [held, bytes, pieceEntry(layer.id, piece++)];
      sums.push(`${hash.digest('hex')}  ${name}`);
      held = [];
      bytes = 0;
      hash = createHash('sha256');
      await entry(name, data, n);
    };
    for await (const c of transfer.exportLayer(layer.id, { bytes: layer.bytes })) {
      let chunk = c as Buffer;
      while (bytes + chunk.length >= PIECE_BYTES) {
        const take = chunk.subarray(0, PIECE_BYTES - bytes);
        held.push(take);
        hash.update(take);
        bytes += take.length;
        await flush();
        chunk = chunk.subarray(take.length);
      }
      if (chunk.length) { held.push(chunk); hash.update(chunk); bytes += chunk.length; }
    }
    if (bytes > 0 || piece === 0) await flush();
    meter.archiveLayer('server');
  }
  const text = Buffer.from(sums.join('\n') + '\n');
  await entry(SUMS, [text], text.length);
  await sink.write(TAR_END);
}

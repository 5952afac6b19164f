import { createHash, type Hash } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createZstdDecompress } from 'node:zlib';
import { ShellbaseError, invalid } from '../../errors.js';
import type { ArchiveUnpacking, Dropped, RemoteBlob } from '../../runtime/types.js';
import type { CommittedLayer, Snapshotter } from '../../store/snapshotter/types.js';
import { withFetchRetries } from '../../util/curl.js';
import { TAR_END, normalizeTarPath, readTar, tarPadding } from '../../util/tar.js';

/** What a layer's bytes must be: its blob's digest and size as a manifest lists them, and its diff_id. */
export interface LayerExpectation {
  /** The blob's digest and size (compressed as sent); for an uncompressed layer, the diff_id. */
  digest: string;
  size?: number;
  diffId: string;
  compression: 'gzip' | 'zstd' | 'none';
}

/** Bytes through, hashed and counted; past `max` bytes the stream fails. */
async function* hashed(source: AsyncIterable<Buffer | Uint8Array>, hash: Hash, counted: (n: number) => void, max = Infinity): AsyncGenerator<Buffer> {
  let n = 0;
  for await (const chunk of source) {
    // A view, not a copy: a fetch body's chunks are Uint8Arrays.
    const c = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    n += c.length;
    if (n > max) throw invalid(`the layer is larger than the ${max} bytes its manifest says`, 'the registry or archive is corrupt; nothing was kept');
    hash.update(c);
    counted(n);
    yield c;
  }
}

const DECOMPRESSED_CHUNK = 256 << 10;

/**
 * The layer's tar stream, decompressed (gzip by the runtime's confined program where it has
 * one); a corrupt stream is the layer's fault (400), not the server's.
 */
async function* decompressed(source: AsyncIterable<Buffer>, compression: LayerExpectation['compression'], runtime: ArchiveUnpacking): AsyncGenerator<Buffer> {
  if (compression === 'none') { yield* source; return; }
  const outside = compression === 'gzip' ? runtime.gunzip?.(source) ?? null : null;
  if (outside) {
    try {
      yield* outside;
    } catch (e) {
      throw asBadLayer(e);
    }
    return;
  }
  // Large output chunks (zlib's default is 16 KiB): each chunk costs a turn through every stage below.
  const z = compression === 'gzip' ? createGunzip({ chunkSize: DECOMPRESSED_CHUNK }) : createZstdDecompress({ chunkSize: DECOMPRESSED_CHUNK });
  const feeding = pipeline(Readable.from(source), z).catch((e: unknown) => { z.destroy(asBadLayer(e)); });
  try {
    for await (const c of z) yield c as Buffer;
  } catch (e) {
    throw asBadLayer(e);
  } finally {
    z.destroy();
    await feeding;
  }
}

const asBadLayer = (e: unknown): Error => (e instanceof ShellbaseError ? e : invalid(
  `the layer cannot be decompressed: ${(e as Error).message}`, 'the registry or archive is corrupt; nothing was kept'));

/**
 * An OCI layer's entries as GNU tar should unpack them: device nodes and FIFOs
 * are dropped (a sandbox cannot make them; images do not need them, /dev is
 * the runtime's), a member whose name holds `..` refuses the layer. Absolute
 * names stay: GNU tar unpacks them below the layer's root, as Docker does.
 */
async function* filtered(tar: AsyncIterable<Buffer>, onDropped: (name: string) => void): AsyncGenerator<Buffer> {
  for await (const e of readTar(tar)) {
    const { header: h } = e;
    if (h.name.split('/').includes('..') || (h.type === 'hardlink' && h.linkname.split('/').includes('..'))) {
      throw invalid(`the layer holds a member that leaves its root (${JSON.stringify(h.name)})`, 'layers name paths below their root only; nothing was kept');
    }
    // As sbx-tarcheck: no types GNU tar reads in ways a pass-through cannot follow (sparse files,
    // volume labels, …), and data only after a regular file's header (tar skips none after others).
    if (h.type === 'other') throw invalid(`the layer holds a member of a type layers here may not hold (${JSON.stringify(h.name)})`, 'nothing was kept');
    if (h.type === 'char' || h.type === 'block' || h.type === 'fifo') { onDropped(h.path); continue; }
    yield e.raw;
    for await (const c of e.body) {
      if (h.type !== 'file') throw invalid(`the layer holds a link, directory or device with data (${JSON.stringify(h.name)})`, 'nothing was kept');
      yield c;
    }
    yield tarPadding(h.size);
  }
  yield TAR_END;
}

/** Where a layer's bytes come from: a body to read, or (for a runtime that fetches layers itself) where it is. */
export interface LayerSource {
  open(): Promise<AsyncIterable<Buffer>>;
  locate?(): Promise<RemoteBlob>;
}

export interface UnpackOptions {
  /** Bytes of the blob received so far (progress). */
  onBytes?: (n: number) => void;
  /** Disk limit of the import (MiB). */
  diskMb: number;
}

function check(what: string, expected: string, actual: string): void {
  if (expected !== actual) {
    throw new ShellbaseError('invalid_argument', `layer ${what} mismatch: expected ${expected}, got ${actual}; nothing was kept`, {
      details: { expected, actual }, hint: 'the registry or archive is corrupt or was tampered with',
    });
  }
}

/**
 * Unpacks one OCI layer into a new layer of the snapshotter: decompressed
 * as it streams (gzip, zstd or none), unpacked by the runtime's confined tar,
 * OCI whiteouts translated (Snapshotter.commitImport). Where the runtime has a
 * program for the whole of it (Runtime.unpackLayer: bwrap's sbx-tarcheck) and the
 * source says where its blob is, the runtime fetches it too and no byte passes
 * through this process; with a body, only the blob's bytes do; else (the memory
 * runtime, whose tar is in process too) each step runs here. Both the blob's digest
 * and the diff_id are checked once the last byte is in; a mismatch, like any
 * failure, discards the scratch, so nothing of the layer is kept. The source is
 * opened (or located) while the scratch is made. A runtime's fetch that failed for a reason
 * that may pass is tried again (FETCH_ATTEMPTS in all).
 */
export async function unpackLayer(snapshotter: Snapshotter, runtime: ArchiveUnpacking, source: LayerSource, expect: LayerExpectation,
  opts: UnpackOptions): Promise<{ layer: CommittedLayer; dropped: Dropped }> {
  const remote = runtime.fetchesLayers && source.locate !== undefined;
  const opened: Promise<AsyncIterable<Buffer> | RemoteBlob> = remote ? source.locate!() : source.open();
  opened.catch(() => undefined); // awaited below, once the scratch is there
  // A fetch of the runtime's own that may pass (a connection cut or stalled, a 5xx) is tried
  // again from its first byte, into a new scratch; a body read here cannot be read again.
  // Located again for each try: a registry's token or a storage URL may not outlive the first.
  if (!remote) return unpackOnce(snapshotter, runtime, opened, remote, expect, opts);
  let shown = 0;
  const onBytes = (n: number) => { if (n > shown) { shown = n; opts.onBytes?.(n); } }; // never backwards on a retry
  let tries = 0;
  return withFetchRetries(() => {
    const located = tries++ === 0 ? opened : source.locate!();
    located.catch(() => undefined); // awaited once the scratch is there
    return unpackOnce(snapshotter, runtime, located, remote, expect, { ...opts, onBytes });
  }, (e) => e instanceof ShellbaseError && e.code === 'unavailable' && e.details?.mayPass === true);
}

async function unpackOnce(snapshotter: Snapshotter, runtime: ArchiveUnpacking, opened: Promise<AsyncIterable<Buffer> | RemoteBlob>, remote: boolean,
  expect: LayerExpectation, opts: UnpackOptions): Promise<{ layer: CommittedLayer; dropped: Dropped }> {
  const blob = createHash('sha256');
  const plain = createHash('sha256');
  const dropped: Dropped = { count: 0, names: [] };
  const scratch = await snapshotter.prepare({ diskMb: opts.diskMb }).catch((e: unknown) => {
    if (!remote) void opened.then((b) => discardBody(b as AsyncIterable<Buffer>), () => undefined);
    throw e;
  });
  let received = 0;
  const counted = (n: number) => { received = n; opts.onBytes?.(n); };
  try {
    const into = snapshotter.writer(scratch).tree();
    // Fetched by the runtime (it hashes the blob too), or read here and hashed as it passes.
    const sent = remote ? null : hashed(await opened as AsyncIterable<Buffer>, blob, counted, expect.size);
    const whole = sent ? runtime.unpackLayer?.(Readable.from(sent), expect.compression, into) ?? null
      : runtime.unpackLayer?.(await opened as RemoteBlob, expect.compression, into, { blobMax: expect.size, onBytes: counted }) ?? null;
    if (whole) {
      const r = await whole;
      if (!sent && !r.blob) throw new Error('the runtime fetched a layer without hashing it');
      if (r.blob) counted(r.blob.size);
      check('digest', expect.digest, r.blob?.digest ?? `sha256:${blob.digest('hex')}`);
      check('diff_id', expect.diffId, r.diffId);
      Object.assign(dropped, { count: r.dropped.count, names: r.dropped.names.map(normalizeTarPath) });
    } else {
      if (!sent) throw new Error('a runtime that fetches layers has no program to unpack them');
      const tar = hashed(decompressed(sent, expect.compression, runtime), plain, () => undefined);
      await runtime.unpackTar(Readable.from(filtered(tar, (p) => { dropped.count++; dropped.names.push(p); })), into);
      check('digest', expect.digest, `sha256:${blob.digest('hex')}`);
      check('diff_id', expect.diffId, `sha256:${plain.digest('hex')}`);
    }
  } catch (e) {
    await snapshotter.discard(scratch);
    throw withLayerDetails(e, expect, received);
  }
  return { layer: await snapshotter.commitImport(scratch), dropped };
}

/** A layer's failure told with which layer it was and how many of its bytes had arrived. */
function withLayerDetails(e: unknown, expect: LayerExpectation, received: number): unknown {
  if (!(e instanceof ShellbaseError)) return e;
  return new ShellbaseError(e.code, e.message, {
    hint: e.hint, cause: e.cause,
    details: { ...e.details, layer: expect.digest, receivedBytes: received, ...(expect.size !== undefined ? { size: expect.size } : {}) },
  });
}

/** Lets go of a body that will not be read (one being read already is left to its reader). */
async function discardBody(body: AsyncIterable<Buffer>): Promise<void> {
  try {
    const destroyable = body as unknown as { destroy?: () => void };
    if (typeof destroyable.destroy === 'function') { destroyable.destroy(); return; }
    await body[Symbol.asyncIterator]().return?.();
  } catch { /* locked by a reader, or already gone */ }
}

/** Reads a layer through and checks both digests, keeping nothing (proof of its content before a stored copy is shared). */
export async function verifyLayer(runtime: ArchiveUnpacking, body: AsyncIterable<Buffer>, expect: LayerExpectation, onBytes?: (n: number) => void): Promise<void> {
  const blob = createHash('sha256');
  const plain = createHash('sha256');
  const sent = hashed(body, blob, (n) => onBytes?.(n), expect.size);
  for await (const _ of hashed(decompressed(sent, expect.compression, runtime), plain, () => undefined)) { /* hashed only */ }
  check('digest', expect.digest, `sha256:${blob.digest('hex')}`);
  check('diff_id', expect.diffId, `sha256:${plain.digest('hex')}`);
}

/**
 * A layer from a tar already in OCI form with no digest to meet (a tenant's import of a context
 * archive, engine/transfer/import.ts): unpacked by the runtime's confined tar as an image's
 * layer is (no device node or FIFO made, nothing outside the layer's root; extended attributes
 * are not kept), its OCI whiteouts translated (Snapshotter.commitImport), kept under `layerId`.
 * Nothing of it stays when it fails.
 */
export async function unpackOciTar(snapshotter: Snapshotter, runtime: ArchiveUnpacking, tar: AsyncIterable<Buffer>,
  opts: { diskMb: number; layerId: string }): Promise<{ layer: CommittedLayer; dropped: Dropped }> {
  const dropped: Dropped = { count: 0, names: [] };
  const scratch = await snapshotter.prepare({ diskMb: opts.diskMb });
  try {
    const into = snapshotter.writer(scratch).tree();
    const whole = runtime.unpackLayer?.(Readable.from(tar), 'none', into) ?? null;
    if (whole) {
      const r = await whole;
      Object.assign(dropped, { count: r.dropped.count, names: r.dropped.names.map(normalizeTarPath) });
    } else {
      await runtime.unpackTar(Readable.from(filtered(tar, (p) => { dropped.count++; dropped.names.push(p); })), into);
    }
    return { layer: await snapshotter.commitImport(scratch, opts.layerId), dropped };
  } catch (e) {
    await snapshotter.discard(scratch).catch(() => undefined);
    throw e;
  }
}

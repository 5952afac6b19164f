import { PassThrough } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';
import { ShellbaseError } from '../../../errors.js';
import { isImageLayer } from '../../layer-ids.js';
import { CAN_FETCH, LAYER_PACK_FORMAT, LOCATION_TTL_S, fetchMayPass } from '../../blobs/pack.js';
import type { BlobStore } from '../../blobs/types.js';
import { withFetchRetries } from '../../../util/curl.js';
import type { CommittedLayer, LayerReader, LayerTarring, LayerTransfer, MountSpec, Scratch, ScratchWriter, Snapshotter } from '../types.js';
import type { BlobLocation, PackSource } from '../../blobs/types.js';
import { Readable } from 'node:stream';
import { LayerCache } from './layer-cache.js';

/** Where each layer's packed blob is: the cluster's table (store/metadata/postgres/cluster-store.ts). */
export interface LayerIndex {
  recordBlob(b: { layerId: string; digest: string; size: number; format: number }): Promise<void>;
  blobsOf(layerIds: readonly string[]): Promise<Map<string, { digest: string; size: number; format: number }>>;
  /** The layers are deleted: forget their blobs (which the index deletes in its own time). */
  dropBlobs(layerIds: readonly string[]): Promise<void>;
}

export interface ClusterSnapshotterOptions {
  /** This host's snapshotter (btrfs): where layers are mounted from. */
  local: Snapshotter & LayerTransfer;
  /** The object store: where committed layers durably live. */
  blobs: BlobStore;
  index: LayerIndex;
  /** Bytes of layers kept on this host before least recently used ones go (SHELLBASE_CACHE_MAX_GB). */
  maxBytes: number;
  /** Whether running work on this worker uses the layer (its pins): such a layer is never evicted. */
  inUse: (layerId: string) => boolean;
  log: Logger;
}

/**
 * The snapshotter of a cluster worker: this host's snapshotter as a cache of the object store.
 *
 * - A commit (and a squash) packs the new layer (LAYER_PACK_FORMAT) and puts it in the blob
 *   store, and records its digest, before it returns: the engine's commit refers to the layer
 *   only afterwards, so a version never names a layer the object store lacks.
 * - Mounting or reading layers this host lacks fetches them first: all of them at once, and
 *   one fetch per layer however many requests want it.
 * - The host keeps at most `maxBytes` of layers it committed or fetched: past that, least
 *   recently used ones go, but never one running work uses (pinned) or one being fetched.
 *   Layers the host held before this process started are not counted (they are deleted at
 *   start when no version names them, and kept otherwise).
 *
 * Squashing writes a new layer (a new blob); no blob is ever rewritten.
 */
export class ClusterSnapshotter implements Snapshotter, LayerTransfer, LayerTarring {
  private readonly fetching = new Map<string, Promise<void>>();
  private readonly cache: LayerCache;
  private readonly local: Snapshotter & LayerTransfer;
  /** Layers fetched from the object store since start (tests and metrics). */
  fetched = 0;

  constructor(private readonly opts: ClusterSnapshotterOptions) {
    this.local = opts.local;
    this.cache = new LayerCache(opts.maxBytes);
  }

  open(): Promise<void> { return this.local.open(); }
  /**
   * Crash recovery of this host's store. A layer here that no version names is this worker's
   * own leftover (a commit cut short: this worker has nothing in flight while it starts) or one
   * collected since: its blob is forgotten too, so the object store does not keep orphans.
   */
  async recover(known: (ids: string[]) => Promise<Set<string>>): Promise<{ scratch: number; layers: number }> {
    const orphans: string[] = [];
    const r = await this.local.recover(async (ids) => {
      const keep = await known(ids);
      orphans.push(...ids.filter((id) => !keep.has(id) && !isImageLayer(id)));
      return keep;
    });
    for (let i = 0; i < orphans.length; i += 1000) await this.opts.index.dropBlobs(orphans.slice(i, i + 1000));
    return r;
  }
  prepare(options: { diskMb: number }): Promise<Scratch> { return this.local.prepare(options); }
  discard(scratch: Scratch): Promise<void> { return this.local.discard(scratch); }
  release(scratch: Scratch): Promise<number> { return this.local.release(scratch); }
  writer(scratch: Scratch): ScratchWriter { return this.local.writer(scratch); }
  sync(): Promise<void> { return this.local.sync(); }
  close(): Promise<void> { return this.local.close(); }

  async mounts(layers: readonly string[], scratch: Scratch): Promise<MountSpec> {
    await this.ensure(layers);
    return this.local.mounts(layers, scratch);
  }

  async commit(scratch: Scratch): Promise<CommittedLayer | null> {
    const layer = await this.local.commit(scratch);
    if (layer) await this.upload(layer.layerId, layer.bytes);
    return layer;
  }

  /** An image's layer, as a commit's: uploaded before it is recorded. */
  async commitImport(scratch: Scratch, layerId?: string): Promise<CommittedLayer> {
    const layer = await this.local.commitImport(scratch, layerId);
    await this.upload(layer.layerId, layer.bytes);
    return layer;
  }

  async squash(layers: readonly string[]): Promise<{ layerId: string; bytes: number }> {
    await this.ensure(layers);
    const squashed = await this.local.squash(layers);
    await this.upload(squashed.layerId, squashed.bytes);
    return squashed;
  }

  async reader(layerId: string): Promise<LayerReader> {
    await this.ensure([layerId]);
    return this.local.reader(layerId);
  }

  /** Deletes layers (garbage collection): here, and from the index, so no worker fetches them again. */
  async remove(layerIds: readonly string[]): Promise<void> {
    await this.opts.index.dropBlobs(layerIds.filter((id) => !isImageLayer(id)));
    await this.local.remove(layerIds);
    for (const id of layerIds) this.cache.forget(id);
  }

  /** Whether the layer is complete on this host. */
  has(layerId: string): boolean { return this.local.has(layerId); }

  /**
   * The layer packed: its blob, straight from the object store (a blob is the layer packed in
   * LAYER_PACK_FORMAT, as it was committed), or, where none is recorded, packed here.
   */
  exportLayer(layerId: string, hint: { bytes?: number } = {}): Readable {
    const out = new PassThrough();
    void (async () => {
      const blob = (await this.opts.index.blobsOf([layerId])).get(layerId);
      if (blob && blob.format === LAYER_PACK_FORMAT) await pipeline(await this.opts.blobs.get(blob.digest), out);
      else {
        await this.ensure([layerId]);
        await pipeline(this.local.exportLayer(layerId, hint), out);
      }
    })().catch((e: unknown) => out.destroy(e as Error));
    return out;
  }

  /** Makes the layer here from its pack, then stores it in the object store as a commit's (recorded before this returns). */
  async importLayer(layerId: string, packed: PackSource): Promise<{ bytes: number }> {
    if ((await this.opts.index.blobsOf([layerId])).has(layerId)) {
      if (packed instanceof Readable) packed.destroy();
      return { bytes: 0 };
    }
    const { bytes } = await this.local.importLayer(layerId, packed);
    await this.upload(layerId, bytes);
    return { bytes };
  }

  /** The layer's tree as a plain tar (store/blobs/pack.ts, `tarTree`), fetched here first. */
  tarLayer(layerId: string): Readable {
    const local = this.local as Partial<LayerTarring>;
    const out = new PassThrough();
    void (async () => {
      if (typeof local.tarLayer !== 'function') throw new Error('this host\'s snapshotter cannot read layers as tars');
      await this.ensure([layerId]);
      await pipeline(local.tarLayer(layerId), out);
    })().catch((e: unknown) => out.destroy(e as Error));
    return out;
  }

  /** Bytes and count of the layers this worker keeps (of those it committed or fetched). */
  usage(): { bytes: number; layers: number } { return { bytes: this.cache.bytes, layers: this.cache.size }; }

  /** Makes every layer of the list present on this host, fetching the missing ones in parallel. */
  async ensure(layers: readonly string[]): Promise<void> {
    const waits: Promise<void>[] = [];
    const wanted: string[] = [];
    for (const id of layers) {
      if (isImageLayer(id)) continue;
      const inFlight = this.fetching.get(id);
      if (inFlight) waits.push(inFlight);
      else if (this.local.has(id)) this.cache.touch(id);
      else wanted.push(id);
    }
    if (wanted.length) {
      const where = this.opts.index.blobsOf(wanted);
      for (const id of wanted) {
        // Another request may have started it while this one waited for nothing: look again.
        let job = this.fetching.get(id);
        if (!job) {
          job = where.then((w) => this.fetch(id, w.get(id))).finally(() => this.fetching.delete(id));
          this.fetching.set(id, job);
        }
        waits.push(job);
      }
    }
    if (waits.length === 0) return;
    await Promise.all(waits);
    await this.evict();
  }

  private async fetch(layerId: string, blob: { digest: string; size: number; format: number } | undefined): Promise<void> {
    if (this.local.has(layerId)) return;
    if (!blob) {
      throw new ShellbaseError('unavailable', `layer ${layerId} is neither on this worker nor in the object store`, {
        hint: 'the layer was lost (a worker died before uploading it, or it was collected); reset the context to another version',
        details: { layer: layerId },
      });
    }
    if (blob.format !== LAYER_PACK_FORMAT) {
      throw new ShellbaseError('unavailable', `layer ${layerId} is packed in format ${blob.format}; this worker reads ${LAYER_PACK_FORMAT}`, {
        hint: 'run the same shellbase release on every worker',
      });
    }
    const started = performance.now();
    // Where the store gives a URL, curl fetches the blob straight into the unpacking (pack.ts):
    // none of its bytes pass through this process. A URL that cannot be made (credentials not
    // resolved) leaves the stream's GET to say why.
    const located = CAN_FETCH ? await this.opts.blobs.locate?.(blob.digest, LOCATION_TTL_S).catch(() => null) : null;
    const body = located ? null : new PassThrough();
    try {
      if (body) {
        // The GET goes out while the snapshotter makes the layer's scratch space (a subvolume: a
        // process or two), not after: its body waits in the pipe, and the unpacking starts on it
        // as soon as the space is there.
        // A failed GET errors the body, which unpacking (once it reads) reports; until then the
        // error waits on the stream, not as an unhandled event.
        body.on('error', () => undefined);
        void this.opts.blobs.get(blob.digest).then((got) => pipeline(got, body)).catch((e: unknown) => body.destroy(e as Error));
      }
      // curl writes into a pipe and retries nothing itself (util/curl.ts); a failed import leaves
      // nothing behind, so a fetch that may pass is tried again whole, by a new URL (the first
      // may have expired during a long fetch).
      let tries = 0;
      const relocated = async () => (tries++ === 0 ? null : await this.opts.blobs.locate?.(blob.digest, LOCATION_TTL_S).catch(() => null)) ?? located!;
      const { bytes } = body ? await this.local.importLayer(layerId, body)
        : await withFetchRetries(async () => this.local.importLayer(layerId, await relocated()), fetchMayPass);
      this.cache.touch(layerId, bytes);
      this.fetched++;
      this.opts.log.debug({ layer: layerId, packed: blob.size, bytes, by: body ? 'stream' : 'url', ms: Math.round(performance.now() - started) }, 'layer fetched');
    } catch (e) {
      body?.destroy(); // a GET nothing reads any more lets its connection go
      throw unavailable(`fetching layer ${layerId} from the object store failed`, e);
    }
  }

  /**
   * Packs and stores a new layer, then records where it is; the local layer goes if that fails.
   * The store is synced first: a file whose blocks are not yet allocated looks sparse to tar,
   * which would pack the same tree differently (pack.ts); the commit's own sync is then cheap.
   */
  private async upload(layerId: string, bytes: number): Promise<void> {
    await this.local.sync();
    const packed = this.local.exportLayer(layerId, { bytes });
    try {
      const info = await this.opts.blobs.put(packed);
      await this.opts.index.recordBlob({ layerId, digest: info.digest, size: info.size, format: LAYER_PACK_FORMAT });
    } catch (e) {
      packed.destroy(); // stops the packer before its tree goes
      await this.local.remove([layerId]).catch(() => undefined);
      throw unavailable(`storing layer ${layerId} in the object store failed; nothing was committed`, e);
    }
    this.cache.touch(layerId, bytes);
    await this.evict();
  }

  /** Deletes least recently used layers while the cache is over its bound, skipping used ones. */
  private async evict(): Promise<void> {
    if (!this.cache.over()) return;
    const doomed: string[] = [];
    for (const id of this.cache.victims()) {
      if (!this.cache.over()) break;
      if (this.opts.inUse(id) || this.fetching.has(id)) continue;
      doomed.push(id);
      this.cache.forget(id);
    }
    if (doomed.length) {
      await this.local.remove(doomed);
      this.opts.log.debug({ layers: doomed.length }, 'layers evicted from the cache');
    }
  }
}

function unavailable(message: string, cause: unknown): ShellbaseError {
  if (cause instanceof ShellbaseError) return cause;
  return new ShellbaseError('unavailable', `${message}: ${(cause as Error)?.message ?? String(cause)}`, {
    hint: 'check that the object store is reachable from this worker; the request can be retried', cause,
  });
}

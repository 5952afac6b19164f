import type { Caller, Deps } from '../../core/deps.js';
import { unpackLayer, verifyLayer, type LayerExpectation, type LayerSource } from '../../images/oci/unpack.js';
import { KeyedLock } from '../../util/keyed-lock.js';

/** A line of progress for a pull's or an import's stream. */
export type Progress = (p: { message: string; layer?: string; bytes?: number; total?: number }) => void;

/** The diff_id of an empty tar (1024 zero bytes): a layer that changes nothing, which images often carry. */
export const EMPTY_LAYER = 'sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef';

export interface StoredLayer {
  id: string;
  bytes: number;
}

const short = (d: string) => d.slice(7, 19);

/**
 * Imported layers, stored once per host: a layer is found again by its
 * content (its diff_id, `layers.digest`). A tenant that has never referred to
 * a stored copy proves it has the content first (its bytes are fetched and
 * both digests checked, nothing written): a digest alone never hands out
 * another tenant's files. One import per digest at a time in this server.
 */
export class ImportedLayers {
  private readonly locks = new KeyedLock();

  constructor(private readonly deps: Deps) {}

  /**
   * The stored layer with `expect`'s content, pinned by the caller's hold,
   * imported from `source` when there is none (or, with `fresh`, always: a
   * content an image repeats must be a second layer, as overlayfs takes a
   * directory once per mount).
   */
  async obtain(caller: Caller, expect: LayerExpectation, source: LayerSource, progress: Progress,
    fresh = false): Promise<StoredLayer> {
    const { metadata: md, snapshotter, runtime, config, durability } = this.deps;
    const layer = expect.diffId;
    let last = 0;
    const onBytes = (bytes: number) => {
      // A line every quarter second at most, and the last one.
      if (performance.now() - last < 250 && bytes !== expect.size) return;
      last = performance.now();
      progress({ message: `${short(layer)}: ${bytes} bytes`, layer, bytes, ...(expect.size ? { total: expect.size } : {}) });
    };
    return this.locks.run(expect.diffId, async () => {
      const existing = fresh ? null : await this.existing(caller, expect.diffId);
      if (existing) {
        if (!(await md.versions.tenantRefersTo(caller.tenantId, existing.id))) {
          progress({ message: `${short(layer)}: stored already; checking its content`, layer });
          await verifyLayer(runtime, await source.open(), expect, onBytes);
        }
        progress({ message: `${short(layer)}: stored already`, layer });
        return existing;
      }
      progress({ message: `${short(layer)}: downloading`, layer, ...(expect.size ? { total: expect.size } : {}) });
      // The request goes out while the layer's scratch space is made.
      const { layer: made, dropped } = await unpackLayer(snapshotter, runtime, source, expect, { diskMb: config.maximums.diskMb, onBytes });
      // Pinned before its row exists: collection takes unreferenced rows that nothing pins.
      caller.hold.layerIds([made.layerId]);
      await durability.layers();
      await md.versions.addLayer({ id: made.layerId, kind: 'import', bytes: made.bytes, createdAt: new Date().toISOString(), digest: expect.diffId });
      if (dropped.count) progress({ message: `${short(layer)}: dropped ${dropped.count} device nodes or FIFOs (${dropped.names.slice(0, 3).join(', ')}${dropped.count > 3 ? ', …' : ''})`, layer });
      progress({ message: `${short(layer)}: unpacked (${made.changes.length} paths, ${made.bytes} bytes)`, layer });
      return { id: made.layerId, bytes: made.bytes };
    });
  }

  /**
   * A stored layer with this content, pinned. The id is pinned before its row
   * is read again: collection either keeps it or has deleted the row by then.
   */
  private async existing(caller: Caller, digest: string): Promise<StoredLayer | null> {
    const row = await this.deps.metadata.versions.layerByDigest(digest);
    if (!row) return null;
    caller.hold.layerIds([row.id]);
    return (await this.deps.metadata.versions.knownLayers([row.id])).has(row.id) ? { id: row.id, bytes: row.bytes } : null;
  }
}

import type { Descriptor } from '../../images/oci/manifest.js';
import type { RemoteBlob } from '../../runtime/types.js';
import type { StoredImageConfig } from '../../store/metadata/types.js';

/** What an image is made of, wherever it came from (a registry, an archive). */
export interface ImageSource {
  ref: string;
  /** The digest of its (platform) manifest. */
  digest: string;
  config: StoredImageConfig;
  /** Its layers' blobs, bottom first, with the config's diff_ids. */
  layers: Descriptor[];
  open(d: Descriptor): Promise<AsyncIterable<Buffer>>;
  /** Where a layer's blob is, for a runtime that fetches it itself (a registry's). */
  locate?(d: Descriptor): Promise<RemoteBlob>;
}

import { formatImageRef, type ImageRef } from '../../images/ids.js';
import { isIndex, parseConfig, parseJson, parseManifest, pickPlatform, type Descriptor } from '../../images/oci/manifest.js';
import { RegistryClient, type RegistryOptions } from '../../images/oci/registry.js';
import { invalid } from '../../errors.js';
import type { ImageSource } from './source.js';
import type { Progress } from './layers.js';

/**
 * Resolves a reference on its registry: the manifest (through an index or a
 * manifest list, the linux/amd64 entry), then the config. Layers are fetched
 * later, as the image is stored, straight into their unpacking: no blob is
 * kept on disk.
 */
export async function fetchRemote(ref: ImageRef, opts: RegistryOptions, progress: Progress): Promise<ImageSource> {
  const client = new RegistryClient(ref, opts);
  const text = formatImageRef(ref);
  progress({ message: `resolving ${text}` });
  let m = await client.manifest(ref.digest ?? ref.tag ?? 'latest');
  // An index may name another index (rarely): two levels at most.
  for (let depth = 0; isIndex(m.doc, m.mediaType); depth++) {
    if (depth === 2) throw invalid('the image index nests too deep', 'point the reference at an image manifest');
    const entry = pickPlatform(m.doc);
    m = await client.manifest(entry.digest);
  }
  const manifest = parseManifest(m.doc);
  const config = parseConfig(parseJson(await client.blobBytes(manifest.config.digest), 'config'));
  if (config.diffIds.length !== manifest.layers.length) {
    throw invalid(`the image's config lists ${config.diffIds.length} layers and its manifest ${manifest.layers.length}`, 'the image is malformed');
  }
  progress({ message: `${text}: manifest ${m.digest}, ${manifest.layers.length} layers` });
  return {
    ref: text, digest: m.digest, config: { ...config }, layers: manifest.layers,
    open: (d) => client.blob(d.digest),
    ...(client.locatable ? { locate: (d: Descriptor) => client.locate(d.digest) } : {}),
  };
}

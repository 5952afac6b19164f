import type { Image } from '@shellbase/protocol';
import path from 'node:path';
import { Readable } from 'node:stream';
import { invalid } from '../../errors.js';
import { formatImageRef, parseImageRef } from '../../images/ids.js';
import { isIndex, parseConfig, parseJson, parseManifest, pickPlatform, type Descriptor } from '../../images/oci/manifest.js';
import { normalizeTarPath, readTar } from '../../util/tar.js';
import { LocalBlobStore } from '../../store/blobs/local/local-blobs.js';
import type { BlobInfo } from '../../store/blobs/types.js';
import { newId } from '../../util/ids.js';
import type { ImageSource } from './source.js';
import type { Progress } from './layers.js';
import { removeTree } from '../../util/remove.js';

/** The most a JSON document of an archive (index, manifest, config) may be. */
const MAX_DOCUMENT = 4 << 20;

/** An archive spooled into a blob store of its own: its files by path, read in any order. */
class Spool {
  readonly files = new Map<string, BlobInfo>();
  readonly links = new Map<string, string>();

  constructor(readonly blobs: LocalBlobStore) {}

  /** The blob a path names (following the archive's links, as `docker save` makes for shared layers). */
  find(p: string): BlobInfo {
    let at = normalizeTarPath(p);
    for (let hops = 0; hops < 8 && !this.files.has(at) && this.links.has(at); hops++) at = this.links.get(at)!;
    const f = this.files.get(at);
    if (!f) throw invalid(`the archive has no file ${JSON.stringify(p)}`, 'send a whole OCI layout or docker save archive');
    return f;
  }

  /** An OCI layout's blob by digest, its file's content checked against its name. */
  blob(digest: string): BlobInfo {
    const f = this.find(`blobs/${digest.replace(':', '/')}`);
    if (f.digest !== digest) throw invalid(`the archive's blob ${digest} holds ${f.digest}`, 'the archive is corrupt; nothing was kept');
    return f;
  }

  async json(f: BlobInfo, what: string): Promise<unknown> {
    if (f.size > MAX_DOCUMENT) throw invalid(`the archive's ${what} is larger than ${MAX_DOCUMENT} bytes`, 'send an OCI layout or docker save archive');
    const chunks: Buffer[] = [];
    for await (const c of await this.blobs.get(f.digest)) chunks.push(c as Buffer);
    return parseJson(Buffer.concat(chunks), what);
  }

  /** A layer blob's descriptor; its compression is read from its first bytes (docker save's layers are plain tar). */
  async layer(f: BlobInfo): Promise<Descriptor> {
    const head: Buffer[] = [];
    for await (const c of await this.blobs.get(f.digest, { start: 0, end: Math.min(3, f.size - 1) })) head.push(c as Buffer);
    const b = Buffer.concat(head);
    const mediaType = b[0] === 0x1f && b[1] === 0x8b ? 'application/vnd.oci.image.layer.v1.tar+gzip'
      : b.readUInt32LE(0) === 0xfd2fb528 ? 'application/vnd.oci.image.layer.v1.tar+zstd' : 'application/vnd.oci.image.layer.v1.tar';
    return { mediaType, digest: f.digest, size: f.size };
  }
}

interface Found { names: string[]; digest: string; config: unknown; layers: Descriptor[] }

/** An OCI layout: index.json's entries (an index within picks linux/amd64), named by their annotations. */
async function ociImages(s: Spool): Promise<Found[]> {
  const index = await s.json(s.find('index.json'), 'index.json') as { manifests?: { digest?: string; annotations?: Record<string, string> }[] };
  if (!Array.isArray(index.manifests)) throw invalid('the archive\'s index.json lists no manifests', 'send an OCI layout archive');
  const out: Found[] = [];
  for (const entry of index.manifests) {
    const a = entry.annotations ?? {};
    // ref.name is often a tag only (skopeo's `oci:DIR:TAG`): a name only when it has a repository.
    const tagged = a['org.opencontainers.image.ref.name'];
    const name = a['io.containerd.image.name'] ?? (tagged && /[/:]/.test(tagged) ? tagged : undefined);
    let digest = String(entry.digest);
    let doc = await s.json(s.blob(digest), 'manifest');
    for (let depth = 0; isIndex(doc); depth++) {
      if (depth === 2) throw invalid('the archive\'s index nests too deep', 'send an OCI layout archive');
      digest = pickPlatform(doc).digest;
      doc = await s.json(s.blob(digest), 'manifest');
    }
    const m = parseManifest(doc);
    out.push({ names: name ? [name] : [], digest, config: await s.json(s.blob(m.config.digest), 'config'), layers: m.layers.map((l) => ({ ...l, ...s.blob(l.digest) })) });
  }
  return out;
}

/** A `docker save` archive: manifest.json's entries, named by their RepoTags; its config's digest stands for a manifest's. */
async function dockerImages(s: Spool): Promise<Found[]> {
  const list = await s.json(s.find('manifest.json'), 'manifest.json');
  if (!Array.isArray(list)) throw invalid('the archive\'s manifest.json is not a list', 'send a docker save archive');
  const out: Found[] = [];
  for (const e of list as { Config?: string; RepoTags?: string[]; Layers?: string[] }[]) {
    if (typeof e.Config !== 'string' || !Array.isArray(e.Layers)) throw invalid('the archive\'s manifest.json is malformed', 'send a docker save archive');
    const config = s.find(e.Config);
    const layers: Descriptor[] = [];
    for (const l of e.Layers) layers.push(await s.layer(s.find(String(l))));
    out.push({ names: Array.isArray(e.RepoTags) ? e.RepoTags.map(String) : [], digest: config.digest, config: await s.json(config, 'config'), layers });
  }
  return out;
}

/**
 * Imports the images of an archive (an OCI layout, or a `docker save` tar,
 * which newer Docker makes an OCI layout too). The archive streams once into
 * a blob store of the import's own below `$SHELLBASE_HOME/tmp` (its entries
 * can come in any order), then each image is recorded from it; the spool is
 * deleted when the import ends, whatever happened.
 */
export async function importArchive(home: string, body: Readable, ref: string | undefined, progress: Progress,
  record: (src: ImageSource) => Promise<Image>): Promise<Image[]> {
  const dir = path.join(home, 'tmp', newId('import'));
  try {
    const s = new Spool(new LocalBlobStore(dir));
    for await (const e of readTar(body)) {
      const { header: h } = e;
      if (h.type === 'file') s.files.set(h.path, await s.blobs.put(Readable.from(e.body)));
      else if (h.type === 'symlink') s.links.set(h.path, normalizeTarPath(path.posix.join(path.posix.dirname(h.path), h.linkname)));
      else if (h.type === 'hardlink') s.links.set(h.path, normalizeTarPath(h.linkname));
    }
    progress({ message: `received ${s.files.size} files` });
    const found = s.files.has('index.json') ? await ociImages(s) : s.files.has('manifest.json') || s.links.has('manifest.json') ? await dockerImages(s)
      : (() => { throw invalid('the archive is neither an OCI layout (index.json) nor a docker save archive (manifest.json)', 'make it with `docker save`, `skopeo copy … oci-archive:` or `umoci`'); })();
    if (found.length === 0) throw invalid('the archive holds no image', 'send an archive of at least one image');
    if (ref !== undefined && found.length > 1) throw invalid(`the archive holds ${found.length} images: ref names one`, 'import them without ref (each by its own name)');
    const images: Image[] = [];
    for (const f of found) {
      const names = ref !== undefined ? [ref] : f.names.map((n) => parseImageRef(n)).filter((r) => r !== null).map(formatImageRef);
      if (names.length === 0) throw invalid('the archive names no image (or only a tag)', 'pass ref to name it, e.g. ?ref=myimage:1');
      const config = parseConfig(f.config);
      if (config.diffIds.length !== f.layers.length) throw invalid('an image of the archive lists more layers in its config than its manifest', 'the archive is malformed');
      for (const name of names) {
        images.push(await record({ ref: name, digest: f.digest, config, layers: f.layers, open: async (d) => s.blobs.get(d.digest) as Promise<Readable> }));
      }
    }
    return images;
  } finally {
    await removeTree(dir);
  }
}

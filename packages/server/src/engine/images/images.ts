import type { ContextConfig, ContextDefaults, Image, ImageConfig } from '@shellbase/protocol';
import type { Readable } from 'node:stream';
import { ShellbaseError, invalid, notFound } from '../../errors.js';
import { durably, type Caller, type Deps } from '../../core/deps.js';
import { IMAGE_NAMES } from '../../images/index.js';
import { formatImageRef, parseImageRef, type ImageRef } from '../../images/ids.js';
import { layerCompression } from '../../images/oci/manifest.js';
import type { LayerExpectation } from '../../images/oci/unpack.js';
import type { ImageRow, NewVersion, VersionRow } from '../../store/metadata/types.js';
import { newId } from '../../util/ids.js';
import { importArchive } from './archive.js';
import { EMPTY_LAYER, ImportedLayers, type Progress } from './layers.js';
import { fetchRemote } from './pull.js';
import type { ImageSource } from './source.js';

/** The most layers an image may have: its contexts' chains must stay mountable (engine/squash.ts). */
export const MAX_IMAGE_LAYERS = 64;
/**
 * Layers fetched and unpacked at once in one pull (each is a GET, a decompressor and a tar, each
 * mostly waiting on the others; four measured faster than three on two vCPUs: docs/performance.md).
 */
const PARALLEL_LAYERS = 4;

interface Lookups {
  version(caller: Caller, id: string): Promise<VersionRow>;
  imageVersion(image: string): Promise<VersionRow>;
}

/** What a context made of an image starts with. */
export interface ImageStart {
  version: VersionRow;
  /** The reference as the context records it. */
  image: string;
  defaults?: ContextDefaults;
  config?: ContextConfig;
}

const toImage = (r: ImageRow): Image => {
  const { format: _f, diffIds, ...config } = r.config;
  return { ref: r.ref, digest: r.digest, version: r.version, layers: diffIds.length, bytes: r.bytes, config, createdAt: r.createdAt };
};

/** A context's defaults from an image's config: its Env, WorkingDir (else /) and User. */
export function defaultsOf(c: ImageConfig): ContextDefaults {
  return { env: c.env, cwd: c.cwd ?? '/', ...(c.user ? { user: c.user } : {}) };
}

export function configOf(c: ImageConfig): ContextConfig {
  return {
    ...(c.entrypoint ? { entrypoint: c.entrypoint } : {}), ...(c.cmd ? { cmd: c.cmd } : {}),
    ...(c.exposedPorts ? { exposedPorts: c.exposedPorts } : {}), ...(c.labels ? { labels: c.labels } : {}),
  };
}

/** Parses a reference given by a caller, or says what is wrong with it (400). */
export function checkImageRef(text: string): ImageRef {
  const ref = parseImageRef(text);
  if (!ref) {
    throw invalid(`${JSON.stringify(text)} is not an image reference`, 'pass [REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST], e.g. docker.io/library/python:3.12-slim');
  }
  return ref;
}

/**
 * A tenant's OCI images: pulled from registries or imported from archives.
 * Each image is a root version of the tenant's whose layers are imported
 * layers (stored once per host, engine/images/layers.ts); an image row names
 * it by reference.
 */
export class Images {
  readonly layers: ImportedLayers;

  constructor(private readonly deps: Deps, private readonly lookups: Lookups) {
    this.layers = new ImportedLayers(deps);
  }

  /** Pulls an image from its registry (Registry HTTP API v2). */
  pull(caller: Caller, req: { ref: string; insecure?: boolean }, progress: Progress, signal?: AbortSignal): Promise<Image> {
    const ref = checkImageRef(req.ref);
    if (IMAGE_NAMES.includes(req.ref as never)) {
      throw invalid(`${req.ref} is a built-in image: it needs no pull`, `to pull Docker Hub's, pass docker.io/library/${req.ref}`);
    }
    return durably(this.deps.durability, async () => this.record(caller, await fetchRemote(ref, { insecure: req.insecure, signal }, progress), progress));
  }

  /** Imports the images of an OCI layout or `docker save` archive (a tar stream); `ref` names an archive's one image. */
  import(caller: Caller, body: Readable, opts: { ref?: string }, progress: Progress): Promise<Image[]> {
    const ref = opts.ref === undefined ? undefined : formatImageRef(checkImageRef(opts.ref));
    return durably(this.deps.durability, () => importArchive(this.deps.config.home, body, ref, progress,
      (src) => this.record(caller, src, progress)));
  }

  async list(caller: Caller): Promise<Image[]> {
    return (await this.deps.metadata.images.list(caller.tenantId)).map(toImage);
  }

  /** Forgets a reference; the layers go once nothing else uses them (garbage collection). */
  delete(caller: Caller, text: string): Promise<void> {
    const ref = formatImageRef(checkImageRef(text));
    return durably(this.deps.durability, async () => {
      if (!(await this.deps.metadata.images.delete(caller.tenantId, ref))) throw notFound('image', ref);
    });
  }

  /** What a context made of `image` starts from: a built-in image's root version, or a pulled image's. */
  async start(caller: Caller, image: string): Promise<ImageStart> {
    if (IMAGE_NAMES.includes(image as never)) return { version: await this.lookups.imageVersion(image), image };
    const ref = formatImageRef(checkImageRef(image));
    const row = await this.deps.metadata.images.get(caller.tenantId, ref);
    if (!row) {
      throw new ShellbaseError('not_found', `image ${ref} has not been pulled`, {
        details: { image: ref }, hint: `pull it first (POST /v1/images/pull, \`shellbase image pull ${image}\`), or use one of: ${IMAGE_NAMES.join(', ')}`,
      });
    }
    return { version: await this.lookups.version(caller, row.version), image: ref, defaults: defaultsOf(row.config), config: configOf(row.config) };
  }

  /**
   * Stores an image's layers (those not stored yet), then its root version and
   * its row in one transaction. An image the tenant has under another
   * reference (same manifest digest) shares that root version.
   */
  private async record(caller: Caller, src: ImageSource, progress: Progress): Promise<Image> {
    const { metadata: md } = this.deps;
    const same = await md.images.byDigest(caller.tenantId, src.digest);
    const createdAt = new Date().toISOString();
    if (same) {
      await this.lookups.version(caller, same.version);
      const row: ImageRow = { ...same, ref: src.ref, createdAt };
      await md.images.put(row);
      progress({ message: `${src.ref}: the same image as ${same.ref}` });
      return toImage(row);
    }
    if (src.layers.length > MAX_IMAGE_LAYERS) {
      throw invalid(`the image has ${src.layers.length} layers; shellbase takes at most ${MAX_IMAGE_LAYERS}`, 'squash the image (e.g. build it with fewer RUN steps) first');
    }
    const wanted = src.layers.map((d, i) => ({ d, diffId: src.config.diffIds[i] }));
    // A layer that changes nothing is left out (unless the image has nothing else).
    const kept = wanted.filter((l) => l.diffId !== EMPTY_LAYER);
    const todo = kept.length ? kept : wanted.slice(-1);
    const ids: { id: string; bytes: number }[] = new Array(todo.length);
    const seen = new Set<string>();
    const fresh = todo.map((l) => { const again = seen.has(l.diffId); seen.add(l.diffId); return again; });
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < todo.length; i = next++) {
        const { d, diffId } = todo[i];
        const expect: LayerExpectation = { digest: d.digest, size: d.size, diffId, compression: layerCompression(d.mediaType) };
        const source = { open: () => src.open(d), ...(src.locate ? { locate: () => src.locate!(d) } : {}) };
        ids[i] = await this.layers.obtain(caller, expect, source, progress, fresh[i]);
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL_LAYERS, todo.length) }, worker));
    const bytes = ids.reduce((n, l) => n + l.bytes, 0);
    const version: NewVersion = {
      id: newId('v'), tenantId: caller.tenantId, parent: null, context: null, depth: 0, layers: ids.map((l) => l.id), changes: null,
      cause: { kind: 'image', command: src.ref }, bytes, createdAt,
    };
    caller.hold.version(version.id);
    const row: ImageRow = { tenantId: caller.tenantId, ref: src.ref, digest: src.digest, version: version.id, config: src.config, bytes, createdAt };
    await md.images.put(row, version);
    progress({ message: `${src.ref}: ${ids.length} layers, ${bytes} bytes` });
    return toImage(row);
  }
}


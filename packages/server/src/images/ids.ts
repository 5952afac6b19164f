import { newId } from '../util/ids.js';

/**
 * Layer ids and image references. This module is the only one that spells or
 * parses them.
 *
 * Layer ids:
 * - `image:NAME:TAG`: a built-in image built from a recipe (TAG names the
 *   build, e.g. the recipe's version and hash); its tree is in the image cache.
 * - `o_…`: a layer imported from an OCI image (pulled or imported): the
 *   snapshotter's own, found again by its content (the layer row's digest, the
 *   OCI diff_id), never squashed into a tenant's layer.
 * - every other id (`l_…`) is a layer the snapshotter made from a scratch.
 */
const PREFIX = 'image:';
const IMPORTED = 'o';

export interface ImageLayer {
  name: string;
  tag: string;
}

export function imageLayerId(name: string, tag: string): string {
  return `${PREFIX}${name}:${tag}`;
}

/** Whether a layer is a built-in image's (it lives in the image cache, is never squashed, deleted or counted as a tenant's bytes). */
export function isImageLayer(layerId: string): boolean {
  return layerId.startsWith(PREFIX);
}

/** The image a layer id names; null for other layers. */
export function parseImageLayer(layerId: string): ImageLayer | null {
  if (!isImageLayer(layerId)) return null;
  const rest = layerId.slice(PREFIX.length);
  const colon = rest.indexOf(':');
  if (colon <= 0) return null;
  return { name: rest.slice(0, colon), tag: rest.slice(colon + 1) };
}

/** A new id for a layer imported from an OCI image. */
export function newImportedLayerId(): string {
  return newId(IMPORTED);
}

/** Whether a layer was imported from an OCI image. */
export function isImportedLayer(layerId: string): boolean {
  return layerId.startsWith(`${IMPORTED}_`);
}

/**
 * How many layers at the bottom of a version are its image's (a built-in
 * image's one, or an OCI image's imported ones): squashing keeps them as they
 * are, since they are shared with every other context of the image.
 */
export function baseLayerCount(layers: readonly string[]): number {
  let n = 0;
  while (n < layers.length && (isImageLayer(layers[n]) || isImportedLayer(layers[n]))) n++;
  return Math.max(1, n);
}

/** Whether a version's layers are one image and nothing else (a context never written to). */
export function isBareImage(layers: readonly string[]): boolean {
  return layers.length === 1 && isImageLayer(layers[0]);
}

/** The id of an image's root version (one per build). */
export function imageVersionId(name: string, tag: string): string {
  return `v_${name}_${tag}`;
}

/**
 * An OCI image reference, normalized as Docker does: `python:3.12` is
 * `docker.io/library/python:3.12`; a first component with a `.` or `:`, or
 * `localhost`, names the registry; no tag and no digest means `latest`.
 */
export interface ImageRef {
  /** Registry host (and port) as written; `docker.io` for Docker Hub. */
  registry: string;
  /** Repository path, e.g. `library/python`. */
  repository: string;
  tag?: string;
  /** `sha256:…`: the manifest (or index) the reference pins. */
  digest?: string;
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const HOST = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$/;
export const SHA256_DIGEST = /^sha256:[0-9a-f]{64}$/;

/** Parses a reference; null when it is not one (the caller says why in its own words). */
export function parseImageRef(text: string): ImageRef | null {
  if (typeof text !== 'string' || text.length === 0 || text.length > 512) return null;
  let rest = text;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!SHA256_DIGEST.test(digest)) return null;
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) return null;
  }
  const parts = rest.split('/');
  let registry = 'docker.io';
  if (parts.length > 1 && (/[.:]/.test(parts[0]) || parts[0] === 'localhost' || parts[0].startsWith('['))) {
    registry = parts.shift()!;
    if (!HOST.test(registry)) return null;
  }
  if (registry === 'index.docker.io' || registry === 'registry-1.docker.io') registry = 'docker.io';
  if (registry === 'docker.io' && parts.length === 1) parts.unshift('library');
  if (parts.length === 0 || !parts.every((p) => COMPONENT.test(p))) return null;
  const repository = parts.join('/');
  if (repository.length > 255) return null;
  return { registry, repository, ...(tag === undefined && digest === undefined ? { tag: 'latest' } : tag !== undefined ? { tag } : {}), ...(digest ? { digest } : {}) };
}

/** The normalized text of a reference: `registry/repository[:tag][@digest]`. */
export function formatImageRef(ref: ImageRef): string {
  return `${ref.registry}/${ref.repository}${ref.tag !== undefined ? `:${ref.tag}` : ''}${ref.digest ? `@${ref.digest}` : ''}`;
}

/** The host the Registry HTTP API answers on for a reference's registry. */
export function registryHost(registry: string): string {
  return registry === 'docker.io' ? 'registry-1.docker.io' : registry;
}

/** Registries on this host, spoken to over plain HTTP as Docker does (no TLS on loopback). */
export function isLoopbackRegistry(registry: string): boolean {
  const host = registry.startsWith('[') ? registry.slice(1, registry.indexOf(']')) : registry.replace(/:\d+$/, '');
  return host === 'localhost' || /^127\.\d+\.\d+\.\d+$/.test(host) || host === '::1';
}

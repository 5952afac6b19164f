import { newId } from '../util/ids.js';

/**
 * Layer ids (and the ids of images' root versions). This module is the only one that spells or
 * parses them; image references are images/ids.ts'.
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

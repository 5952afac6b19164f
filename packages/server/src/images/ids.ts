/**
 * Layer ids of images: `image:NAME:TAG` (TAG names the build, e.g. the recipe's
 * version and hash). Every other layer id is the snapshotter's own (`l_…`).
 * This module is the only one that spells or parses them.
 */
const PREFIX = 'image:';

export interface ImageLayer {
  name: string;
  tag: string;
}

export function imageLayerId(name: string, tag: string): string {
  return `${PREFIX}${name}:${tag}`;
}

/** Whether a layer is an image's (it lives in the image cache, is never squashed, deleted or counted as a tenant's bytes). */
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

/** Whether a version's layers are one image and nothing else (a context never written to). */
export function isBareImage(layers: readonly string[]): boolean {
  return layers.length === 1 && isImageLayer(layers[0]);
}

/** The id of an image's root version (one per build). */
export function imageVersionId(name: string, tag: string): string {
  return `v_${name}_${tag}`;
}

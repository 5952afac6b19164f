import { ShellbaseError, invalid } from '../../errors.js';
import { SHA256_DIGEST } from '../ids.js';

/**
 * OCI image manifests, indexes and configs (and Docker's schema 2 forms of
 * the first two), as far as an import needs them: which manifest of an index
 * is linux/amd64, which blobs are the layers, what the config says.
 */
export const MEDIA = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
} as const;

/** What a registry is asked for (the Accept header of a manifest request). */
export const MANIFEST_ACCEPT = [MEDIA.ociIndex, MEDIA.ociManifest, MEDIA.dockerList, MEDIA.dockerManifest].join(', ');

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string; variant?: string };
}

export interface ImageManifest {
  config: Descriptor;
  layers: Descriptor[];
}

/** The part of an image's config shellbase keeps (format 1, persisted with the image). */
export interface ImageConfig {
  format: 1;
  env: Record<string, string>;
  cwd?: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
  exposedPorts?: string[];
  labels?: Record<string, string>;
  /** The config's `rootfs.diff_ids`: the uncompressed layers' digests, bottom first. */
  diffIds: string[];
}

/** The one platform shellbase runs. */
export const PLATFORM = { os: 'linux', architecture: 'amd64' } as const;

/** A layer's compression, from its media type (tar, tar+gzip, tar+zstd; Docker's forms too). */
export function layerCompression(mediaType: string): 'gzip' | 'zstd' | 'none' {
  if (/foreign|nondistributable/.test(mediaType)) {
    throw invalid(`the image has a foreign layer (${mediaType}), which is not distributed with it`, 'use a Linux image');
  }
  if (mediaType.endsWith('+zstd') || mediaType.endsWith('.zstd')) return 'zstd';
  if (mediaType.endsWith('+gzip') || mediaType.endsWith('.gzip')) return 'gzip';
  if (mediaType.endsWith('.tar') || mediaType.endsWith('.tar.v1') || mediaType === '') return 'none';
  throw invalid(`unsupported layer media type ${mediaType}`, 'layers must be tar, tar+gzip or tar+zstd');
}

const bad = (what: string) => invalid(`malformed image ${what}`, 'the registry or archive holds something that is not an OCI or Docker image');

function descriptor(d: unknown, what: string): Descriptor {
  const o = d as Partial<Descriptor> | null;
  if (!o || typeof o.digest !== 'string' || !SHA256_DIGEST.test(o.digest) || typeof o.size !== 'number' || !Number.isSafeInteger(o.size) || o.size < 0) throw bad(what);
  return { mediaType: typeof o.mediaType === 'string' ? o.mediaType : '', digest: o.digest, size: o.size, ...(o.platform ? { platform: o.platform } : {}) };
}

/** Whether a JSON document is an index (or manifest list) rather than an image manifest. */
export function isIndex(doc: unknown, mediaType = ''): boolean {
  const o = doc as { mediaType?: string; manifests?: unknown } | null;
  return mediaType === MEDIA.ociIndex || mediaType === MEDIA.dockerList || o?.mediaType === MEDIA.ociIndex
    || o?.mediaType === MEDIA.dockerList || (Array.isArray(o?.manifests) && !('layers' in (o ?? {})));
}

/** The linux/amd64 entry of an index; a clear error naming what there is otherwise. */
export function pickPlatform(index: unknown): Descriptor {
  const list = (index as { manifests?: unknown[] } | null)?.manifests;
  if (!Array.isArray(list)) throw bad('index');
  const all = list.map((d) => descriptor(d, 'index entry'));
  const match = all.find((d) => d.platform?.os === PLATFORM.os && d.platform?.architecture === PLATFORM.architecture)
    ?? (all.length === 1 && !all[0].platform ? all[0] : undefined);
  if (match) return match;
  const have = all.map((d) => `${d.platform?.os ?? '?'}/${d.platform?.architecture ?? '?'}${d.platform?.variant ? `/${d.platform.variant}` : ''}`);
  throw new ShellbaseError('invalid_argument', `the image has no ${PLATFORM.os}/${PLATFORM.architecture} variant (it has ${have.join(', ') || 'none'})`, {
    details: { platforms: have }, hint: `shellbase runs ${PLATFORM.os}/${PLATFORM.architecture} images only`,
  });
}

export function parseManifest(doc: unknown): ImageManifest {
  const o = doc as { schemaVersion?: number; config?: unknown; layers?: unknown[] } | null;
  if (o?.schemaVersion === 1) throw invalid('Docker schema 1 manifests are not supported', 'push the image again with a current Docker or skopeo');
  if (!o || !Array.isArray(o.layers)) throw bad('manifest');
  return { config: descriptor(o.config, 'manifest config'), layers: o.layers.map((l) => descriptor(l, 'manifest layer')) };
}

/** Docker's `K=V` env list as a map (a later entry wins). */
function envMap(list: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (!Array.isArray(list)) return out;
  for (const e of list) {
    if (typeof e !== 'string') continue;
    const eq = e.indexOf('=');
    // Names a sandbox's environment cannot hold (core/validate.ts) are left out.
    if (eq > 0 && /^[A-Za-z_][A-Za-z0-9_]*$/.test(e.slice(0, eq)) && !e.includes('\0')) out[e.slice(0, eq)] = e.slice(eq + 1);
  }
  return out;
}

const strings = (v: unknown): string[] | undefined => (Array.isArray(v) && v.every((s) => typeof s === 'string') ? v : undefined);

/** The config blob's fields shellbase keeps; a config for another platform is refused. */
export function parseConfig(doc: unknown): ImageConfig {
  const o = doc as {
    os?: string; architecture?: string; rootfs?: { type?: string; diff_ids?: unknown[] };
    config?: { Env?: unknown; WorkingDir?: string; User?: string; Entrypoint?: unknown; Cmd?: unknown; ExposedPorts?: Record<string, unknown>; Labels?: Record<string, string> };
  } | null;
  if (!o || !Array.isArray(o.rootfs?.diff_ids)) throw bad('config');
  if ((o.os ?? PLATFORM.os) !== PLATFORM.os || (o.architecture ?? PLATFORM.architecture) !== PLATFORM.architecture) {
    throw new ShellbaseError('invalid_argument', `the image is for ${o.os}/${o.architecture}, not ${PLATFORM.os}/${PLATFORM.architecture}`, {
      details: { platforms: [`${o.os}/${o.architecture}`] }, hint: `shellbase runs ${PLATFORM.os}/${PLATFORM.architecture} images only`,
    });
  }
  const diffIds = o.rootfs.diff_ids.map((d) => {
    if (typeof d !== 'string' || !SHA256_DIGEST.test(d)) throw bad('config (rootfs.diff_ids)');
    return d;
  });
  const c = o.config ?? {};
  const labels = c.Labels && typeof c.Labels === 'object' ? Object.fromEntries(Object.entries(c.Labels).filter(([, v]) => typeof v === 'string')) : undefined;
  return {
    format: 1, env: envMap(c.Env), diffIds,
    ...(c.WorkingDir ? { cwd: c.WorkingDir } : {}),
    ...(c.User ? { user: c.User } : {}),
    ...(strings(c.Entrypoint) ? { entrypoint: strings(c.Entrypoint) } : {}),
    ...(strings(c.Cmd) ? { cmd: strings(c.Cmd) } : {}),
    ...(c.ExposedPorts && typeof c.ExposedPorts === 'object' ? { exposedPorts: Object.keys(c.ExposedPorts) } : {}),
    ...(labels && Object.keys(labels).length ? { labels } : {}),
  };
}

/** A JSON document from bytes, or the malformed-`what` error. */
export function parseJson(bytes: Buffer, what: string): unknown {
  try { return JSON.parse(bytes.toString('utf8')); } catch { throw bad(what); }
}

// Image references (layer ids are store/layer-ids.ts'): this module is the only one that spells or parses them.

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

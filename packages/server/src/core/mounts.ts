import { MAX_MOUNTS, type Mount } from '@shellbase/protocol';
import { invalid } from '../errors.js';

/**
 * Mounts as asked for (queries, services and machines: engine/mounts.ts, machines/mounts.ts):
 * their shape checked before any context is looked up.
 */

/** A mount as asked for, checked. */
export interface MountAsked {
  context: string;
  path: string;
  version?: string;
  readOnly: boolean;
}

/** What a mount path may hold: names of letters, digits and `._-+@=~`, no comma, colon, glob or space. */
const SAFE_PATH = /^(\/[A-Za-z0-9._+@=~-]+)+$/;

/** Paths that are not the context's in a sandbox (the kernel's, and /tmp's own file system). */
const NOT_THE_CONTEXTS = ['/proc', '/dev', '/sys', '/tmp'];

/** Checks the mounts of a query of `own` (shape only: their contexts are looked up later). */
export function checkMounts(own: string, mounts: readonly Mount[] | undefined): MountAsked[] {
  if (!mounts?.length) return [];
  if (mounts.length > MAX_MOUNTS) throw invalid(`a query may mount at most ${MAX_MOUNTS} contexts (${mounts.length} asked for)`, 'mount fewer contexts', { mounts: mounts.length });
  const out = mounts.map((m): MountAsked => {
    const p = m.path;
    if (!p.startsWith('/') || p === '/' || p.endsWith('/') || p.split('/').slice(1).some((s) => s === '' || s === '.' || s === '..')) {
      throw invalid(`mount path ${JSON.stringify(p)} is not an absolute, normalized path below /`, 'write it as /mnt/data: no ., .. or empty segments, no trailing slash', { path: p });
    }
    // Mount options and guest scripts carry the path: only the characters of plain names.
    if (!SAFE_PATH.test(p) || p.split('/').some((s) => s.length > 255)) {
      throw invalid(`mount path ${JSON.stringify(p)} has a character a mount path may not have`, 'use letters, digits and . _ - + @ = ~ in its names (at most 255 each)', { path: p });
    }
    for (const r of NOT_THE_CONTEXTS) {
      if (p === r || p.startsWith(`${r}/`)) throw invalid(`mount path ${p} is in ${r}, which is not part of a context`, 'mount at a path of the context, such as /mnt/data', { path: p });
    }
    if (m.context === own) throw invalid(`context ${own} cannot be mounted into its own query`, 'fork it and mount the fork', { context: own });
    return { context: m.context, path: p, ...(m.version ? { version: m.version } : {}), readOnly: m.readOnly ?? false };
  });
  for (const a of out) {
    for (const b of out) {
      if (a === b) continue;
      if (a.context === b.context) throw invalid(`context ${a.context} is mounted twice`, 'mount each context once', { context: a.context });
      if (a.path === b.path || a.path.startsWith(`${b.path}/`)) {
        throw invalid(`mount ${a.path} is ${a.path === b.path ? 'at the same path as' : 'inside'} mount ${b.path}`, 'give each mount a path of its own, none inside another', { path: a.path });
      }
    }
  }
  return out;
}


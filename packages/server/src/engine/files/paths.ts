import { invalid } from '../../errors.js';

export const MAX_PATH = 4096;
/** Linux's NAME_MAX: no file system here holds a longer name. */
export const MAX_NAME = 255;

/**
 * Splits an absolute context path into its segments. `.` segments are
 * dropped; `..` is kept (resolution treats it, never letting it leave the
 * context root); one trailing slash is allowed. NUL bytes, empty segments
 * (`a//b`), names over 255 bytes and paths over 4096 bytes are refused.
 */
export function parsePath(path: string): string[] {
  if (typeof path !== 'string' || path.length === 0) throw invalid('empty path', 'pass an absolute path such as /root/file');
  if (Buffer.byteLength(path) > MAX_PATH) throw invalid(`path is longer than ${MAX_PATH} bytes`, 'shorten the path');
  if (path.includes('\0')) throw invalid('path contains a NUL byte', 'remove the NUL byte');
  const p = path.startsWith('/') ? path : `/${path}`;
  const trimmed = p.length > 1 && p.endsWith('/') ? p.slice(0, -1) : p;
  if (trimmed === '/') return [];
  const segments = trimmed.slice(1).split('/');
  if (segments.some((s) => s === '')) throw invalid(`path ${JSON.stringify(path)} has an empty segment`, 'remove the doubled slash');
  if (segments.some((s) => Buffer.byteLength(s) > MAX_NAME)) throw invalid(`a name in the path is longer than ${MAX_NAME} bytes`, 'shorten it: no file can have such a name');
  return segments.filter((s) => s !== '.');
}

export const joinPath = (segments: readonly string[]) => `/${segments.join('/')}`;

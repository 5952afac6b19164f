import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { invalid } from '../../errors.js';
import { LocalBlobStore } from './local/local-blobs.js';
import { MemoryBlobStore } from './memory/memory-blobs.js';
import { S3BlobStore, type S3BlobStoreOptions } from './s3/s3-blobs.js';
import type { BlobStore } from './types.js';

export type { BlobErrorCode, BlobInfo, BlobStore } from './types.js';
export { LocalBlobStore } from './local/local-blobs.js';
export { MemoryBlobStore } from './memory/memory-blobs.js';
export { S3BlobStore, S3_LAYOUT_FORMAT, type S3BlobStoreOptions } from './s3/s3-blobs.js';
export { LAYER_PACK_FORMAT, packLayer, unpackLayer } from './pack.js';

/** Where blobs live, as a URL names it. */
export type BlobStoreLocation =
  | { kind: 's3'; bucket: string; prefix: string }
  | { kind: 'local'; dir: string }
  | { kind: 'memory' };

/** What a URL cannot say: the S3 API's endpoint and the client's settings. */
export type BlobStoreUrlOptions = Omit<S3BlobStoreOptions, 'bucket' | 'prefix'>;

const HINT = 'name blobs as s3://BUCKET/PREFIX (the endpoint is a separate option), file:///ABSOLUTE/DIR or an absolute directory';

/**
 * Parses a blob store's URL: `s3://bucket/prefix` (prefix optional), `file:///dir` or an
 * absolute path (a local directory), `memory:` (tests). Anything else is refused
 * (`invalid_argument`): credentials and settings never ride in the URL.
 */
export function parseBlobStoreUrl(url: string): BlobStoreLocation {
  if (path.isAbsolute(url)) return { kind: 'local', dir: path.resolve(url) };
  if (url === 'memory:') return { kind: 'memory' };
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw invalid(`not a blob store URL: ${JSON.stringify(url)}`, HINT);
  }
  if (u.protocol === 'file:' && !u.search && !u.hash && (u.host === '' || u.host === 'localhost')) {
    return { kind: 'local', dir: fileURLToPath(u) };
  }
  if (u.protocol !== 's3:') throw invalid(`unknown blob store scheme ${JSON.stringify(u.protocol)}`, HINT);
  if (u.username || u.password || u.port || u.search || u.hash) {
    throw invalid('an s3:// URL holds a bucket and a prefix only', 'pass the endpoint, region and credentials as options or AWS environment variables');
  }
  // Bucket names as every S3 implementation takes them: 3-63 of a-z 0-9 . -, a letter or digit at each end.
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(u.hostname)) throw invalid(`not an S3 bucket name: ${JSON.stringify(u.hostname)}`, HINT);
  const prefix = decodeURIComponent(u.pathname).replace(/^\/+|\/+$/g, '');
  if (prefix.split('/').some((s) => s === '' || s === '.' || s === '..') && prefix !== '') {
    throw invalid(`not a key prefix: ${JSON.stringify(prefix)}`, 'use segments without empty, . or .. parts');
  }
  return { kind: 's3', bucket: u.hostname, prefix };
}

/** Makes the blob store a URL names (see parseBlobStoreUrl); `options` reach an S3 store only. */
export function openBlobStore(url: string, options: BlobStoreUrlOptions = {}): BlobStore {
  const at = parseBlobStoreUrl(url);
  switch (at.kind) {
    case 's3': return new S3BlobStore({ ...options, bucket: at.bucket, prefix: at.prefix });
    case 'local': return new LocalBlobStore(at.dir);
    case 'memory': return new MemoryBlobStore();
  }
}

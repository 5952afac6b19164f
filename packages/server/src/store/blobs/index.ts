export type { BlobInfo, BlobStore } from './types.js';
export { LocalBlobStore } from './local/local-blobs.js';
export { MemoryBlobStore } from './memory/memory-blobs.js';

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { LocalBlobStore } from '../../packages/server/src/store/blobs/local/local-blobs.ts';
import { MemoryBlobStore } from '../../packages/server/src/store/blobs/memory/memory-blobs.ts';
import { blobStoreConformance } from './blob-store.ts';

blobStoreConformance('memory blob store', async () => ({ blobs: new MemoryBlobStore(), done: async () => undefined }));

blobStoreConformance('local blob store', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-blobs-'));
  return { blobs: new LocalBlobStore(dir), done: async () => rmSync(dir, { recursive: true, force: true }) };
});

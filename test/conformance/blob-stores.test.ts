import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { LocalBlobStore } from '../../packages/server/src/store/blobs/local/local-blobs.ts';
import { MemoryBlobStore } from '../../packages/server/src/store/blobs/memory/memory-blobs.ts';
import { startS3, type TestS3 } from '../s3.ts';
import { blobStoreConformance } from './blob-store.ts';

blobStoreConformance('memory blob store', async () => ({ blobs: new MemoryBlobStore(), done: async () => undefined }));

blobStoreConformance('local blob store', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-blobs-'));
  return { blobs: new LocalBlobStore(dir), done: async () => rmSync(dir, { recursive: true, force: true }) };
});

// One S3 server for the file (test/s3.ts); each case gets a prefix of its own, as tenants of one bucket would.
let s3: Promise<TestS3> | null = null;
let cases = 0;
after(async () => { if (s3) await (await s3).stop(); });
blobStoreConformance('s3 blob store', async () => {
  s3 ??= startS3();
  const store = (await s3).store({ prefix: `case-${++cases}`, partSize: 5 << 20 });
  return { blobs: store, done: async () => store.close() };
}, { locates: true });

import { CreateBucketCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { startFauxqs } from 'fauxqs';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { S3BlobStore, type S3BlobStoreOptions } from '../packages/server/src/store/blobs/s3/s3-blobs.ts';

/**
 * A real S3 API on loopback for tests: fauxqs (npm; its S3 has multipart upload,
 * abort and UploadPartCopy, which s3rver lacks) on a free 127.0.0.1 port, objects
 * kept as files in a temp directory; `stop` ends it and removes the directory.
 */
export interface TestS3 {
  endpoint: string;
  bucket: string;
  /** Its directory of objects (`buckets/BUCKET/objects/KEY.data`) and multipart parts (`_multipart/`). */
  dir: string;
  /** A store on the test bucket (fixed credentials; the endpoint's path-style addressing). */
  store(options?: Partial<S3BlobStoreOptions>): S3BlobStore;
  /** Every key in the bucket (under `prefix`), sorted. */
  keys(prefix?: string): Promise<string[]>;
  /** Multipart uploads started and neither completed nor aborted. */
  openUploads(): string[];
  stop(): Promise<void>;
}

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

export async function startS3(bucket = 'shellbase-test'): Promise<TestS3> {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-s3-'));
  const server = await startFauxqs({ port: 0, host: '127.0.0.1', logger: false, s3StorageDir: dir });
  const endpoint = `http://127.0.0.1:${server.port}`;
  const client = new S3Client({ endpoint, forcePathStyle: true, region: 'us-east-1', credentials });
  const stores: S3BlobStore[] = [];
  try {
    await client.send(new CreateBucketCommand({ Bucket: bucket }));
  } catch (e) {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    endpoint, bucket, dir,
    store: (options = {}) => {
      const s = new S3BlobStore({ bucket, endpoint, credentials, ...options });
      stores.push(s);
      return s;
    },
    keys: async (prefix) => {
      const out: string[] = [];
      let token: string | undefined;
      do {
        const r = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }));
        out.push(...(r.Contents ?? []).map((o) => o.Key!));
        token = r.IsTruncated ? r.NextContinuationToken : undefined;
      } while (token);
      return out.sort();
    },
    openUploads: () => {
      try { return readdirSync(path.join(dir, '_multipart')); } catch { return []; }
    },
    stop: async () => {
      for (const s of stores) s.close();
      client.destroy();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CopyObjectCommand, CreateMultipartUploadCommand,
  UploadPartCommand, UploadPartCopyCommand, type CompletedPart, type S3Client,
} from '@aws-sdk/client-s3';

/** S3's limits: parts per upload, the smallest part but the last, the largest part. */
export const MAX_PARTS = 10_000;
export const MIN_PART = 5 << 20;
export const MAX_PART = 5 * 1024 ** 3;

export interface Bucket {
  client: S3Client;
  /** For server-side copies (their answers come when the copy is done): a longer silence allowed. */
  copyClient?: S3Client;
  bucket: string;
  /** Requests in flight at once for one upload or copy. */
  concurrency: number;
}

/**
 * One multipart upload in progress: parts go up `concurrency` at a time while the
 * next one is read (`add` waits while all slots are busy, so memory stays at about
 * concurrency + 1 parts); nothing exists under the key until `complete`, and
 * `abort` drops what was sent.
 */
export class Multipart {
  private readonly parts: CompletedPart[] = [];
  private readonly inflight = new Set<Promise<void>>();
  private failure: unknown = null;
  private count = 0;
  private state: 'open' | 'completed' | 'aborted' = 'open';

  private constructor(private readonly b: Bucket, readonly key: string, private readonly uploadId: string) {}

  static async start(b: Bucket, key: string): Promise<Multipart> {
    const r = await b.client.send(new CreateMultipartUploadCommand({ Bucket: b.bucket, Key: key }));
    if (!r.UploadId) throw new Error(`CreateMultipartUpload of ${key} returned no upload id`);
    return new Multipart(b, key, r.UploadId);
  }

  /** The number the next part gets (1-based). */
  get nextPart(): number { return this.count + 1; }

  /** Sends one part of data (every part but the last at least MIN_PART bytes). */
  async add(data: Buffer): Promise<void> {
    this.check();
    const n = ++this.count;
    if (n > MAX_PARTS) throw new Error(`${this.key}: more than ${MAX_PARTS} parts`);
    this.track(this.b.client.send(new UploadPartCommand({
      Bucket: this.b.bucket, Key: this.key, UploadId: this.uploadId, PartNumber: n, Body: data, ContentLength: data.length,
    })).then((r) => { this.parts[n - 1] = { PartNumber: n, ETag: r.ETag }; }));
    await this.room();
  }

  /** Copies bytes `start`..`end` (inclusive) of another object of the bucket as the next part. */
  async addCopy(sourceKey: string, start: number, end: number): Promise<void> {
    this.check();
    const n = ++this.count;
    if (n > MAX_PARTS) throw new Error(`${this.key}: more than ${MAX_PARTS} parts`);
    this.track((this.b.copyClient ?? this.b.client).send(new UploadPartCopyCommand({
      Bucket: this.b.bucket, Key: this.key, UploadId: this.uploadId, PartNumber: n,
      CopySource: copySource(this.b.bucket, sourceKey), CopySourceRange: `bytes=${start}-${end}`,
    })).then((r) => { this.parts[n - 1] = { PartNumber: n, ETag: r.CopyPartResult?.ETag }; }));
    await this.room();
  }

  /** Waits for every part, then makes the object (it appears whole, or not at all). */
  async complete(): Promise<void> {
    await Promise.all(this.inflight);
    this.check();
    await this.b.client.send(new CompleteMultipartUploadCommand({
      Bucket: this.b.bucket, Key: this.key, UploadId: this.uploadId, MultipartUpload: { Parts: this.parts },
    }));
    this.state = 'completed';
  }

  /** Drops the upload and its parts (once; never after `complete`). */
  async abort(): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'aborted';
    await Promise.allSettled(this.inflight);
    await this.b.client.send(new AbortMultipartUploadCommand({ Bucket: this.b.bucket, Key: this.key, UploadId: this.uploadId }));
  }

  private track(p: Promise<void>): void {
    const t: Promise<void> = p.catch((e: unknown) => { this.failure ??= e; }).finally(() => this.inflight.delete(t));
    this.inflight.add(t);
  }

  private async room(): Promise<void> {
    while (this.inflight.size >= this.b.concurrency) await Promise.race(this.inflight);
    this.check();
  }

  private check(): void {
    if (this.failure) throw this.failure;
    if (this.state !== 'open') throw new Error(`${this.key}: the multipart upload is ${this.state}`);
  }
}

/**
 * Copies `from` to `to` inside the bucket: one CopyObject up to `maxCopySize` (S3 allows 5 GiB),
 * above it a multipart copy in parts of `partSize` (more when 10,000 would not hold it).
 */
export async function copyObject(b: Bucket, from: string, to: string, size: number, limits: { maxCopySize: number; partSize: number }): Promise<void> {
  if (size <= limits.maxCopySize) {
    await (b.copyClient ?? b.client).send(new CopyObjectCommand({ Bucket: b.bucket, Key: to, CopySource: copySource(b.bucket, from) }));
    return;
  }
  const part = Math.max(limits.partSize, Math.ceil(size / MAX_PARTS));
  const m = await Multipart.start(b, to);
  try {
    for (let start = 0; start < size; start += part) await m.addCopy(from, start, Math.min(size, start + part) - 1);
    await m.complete();
  } catch (e) {
    return cleanUpAfter(e, () => m.abort());
  }
}

/**
 * Runs a clean-up after a failure and throws the failure: a clean-up that fails too is
 * recorded on it (`cleanup`), so the caller still sees the first cause and its code.
 */
export async function cleanUpAfter(error: unknown, cleanup: () => Promise<unknown>): Promise<never> {
  try {
    await cleanup();
  } catch (c) {
    if (error instanceof Error) Object.assign(error, { cleanup: c });
  }
  throw error;
}

/** x-amz-copy-source: the bucket and the key, each path segment URL-encoded. */
function copySource(bucket: string, key: string): string {
  return `${bucket}/${key.split('/').map(encodeURIComponent).join('/')}`;
}

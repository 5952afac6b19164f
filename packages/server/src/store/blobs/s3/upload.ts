import { DeleteObjectCommand, HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { blobError, type BlobInfo } from '../types.js';
import { cleanUpAfter, copyObject, MAX_PART, Multipart, type Bucket } from './multipart.js';

export interface UploadPlan extends Bucket {
  /** The key a blob lives under. */
  keyOf(digest: string): string;
  /** A fresh key under the store's temporary prefix. */
  tempKey(): string;
  partSize: number;
  maxCopySize: number;
  copyPartSize: number;
}

/**
 * Streams a body into the bucket, hashing it on the way; at most about
 * (concurrency + 1) parts are in memory. Which way it goes depends on what is
 * known when the first part is full:
 *
 * - A body no larger than one part was read whole before any request: its digest
 *   is known, so it is one PutObject straight under its final key.
 * - A larger body with an expected digest goes up as a multipart upload under
 *   that final key and is verified before CompleteMultipartUpload: on a
 *   mismatch the upload is aborted, and no object ever existed (no copy made).
 * - A larger body without one cannot be named until its last byte: a multipart
 *   upload under a temporary key, completed, copied server-side to its digest's
 *   key (skipped when that blob exists already), and the temporary object
 *   deleted whatever happens.
 *
 * Parts grow (double every 1,000) so that S3's 10,000 parts hold up to its 5 TiB.
 */
export async function uploadBlob(plan: UploadPlan, body: Readable, expect?: string): Promise<BlobInfo> {
  const hash = createHash('sha256');
  let size = 0;
  let buffered: Buffer[] = [];
  let bufferedBytes = 0;
  let upload: Multipart | null = null;
  const take = () => { const b = Buffer.concat(buffered, bufferedBytes); buffered = []; bufferedBytes = 0; return b; };
  try {
    for await (const c of body) {
      const chunk = Buffer.isBuffer(c) ? c : Buffer.from(c as Uint8Array);
      // A part goes once it is full and more follows: the last bytes always stay for the end.
      if (bufferedBytes >= partSizeFor(plan.partSize, upload?.nextPart ?? 1)) {
        upload ??= await Multipart.start(plan, expect !== undefined ? plan.keyOf(expect) : plan.tempKey());
        await upload.add(take());
      }
      hash.update(chunk);
      size += chunk.length;
      buffered.push(chunk);
      bufferedBytes += chunk.length;
    }
    const digest = `sha256:${hash.digest('hex')}`;
    const mismatch = () => blobError('digest_mismatch', `the body's digest is ${digest}, not ${expect}`);
    if (!upload) {
      if (expect !== undefined && digest !== expect) throw mismatch();
      const data = take();
      await plan.client.send(new PutObjectCommand({ Bucket: plan.bucket, Key: plan.keyOf(digest), Body: data, ContentLength: data.length }));
      return { digest, size };
    }
    if (bufferedBytes > 0) await upload.add(take());
    // An upload into the final key that is never completed (aborted below) leaves nothing behind.
    if (expect !== undefined && digest !== expect) throw mismatch();
    await upload.complete();
    if (expect === undefined) await promote(plan, upload.key, digest, size);
    return { digest, size };
  } catch (e) {
    const open = upload;
    return cleanUpAfter(e, async () => { await open?.abort(); });
  }
}

/** Copies a completed temporary object to its digest's key, then deletes it (whatever the copy did). */
async function promote(plan: UploadPlan, temp: string, digest: string, size: number): Promise<void> {
  const drop = () => plan.client.send(new DeleteObjectCommand({ Bucket: plan.bucket, Key: temp }));
  try {
    if (!(await exists(plan, plan.keyOf(digest)))) {
      await copyObject(plan, temp, plan.keyOf(digest), size, { maxCopySize: plan.maxCopySize, partSize: plan.copyPartSize });
    }
  } catch (e) {
    return cleanUpAfter(e, drop);
  }
  await drop();
}

export async function exists(b: Bucket, key: string): Promise<boolean> {
  try {
    await b.client.send(new HeadObjectCommand({ Bucket: b.bucket, Key: key }));
    return true;
  } catch (e) {
    if (statusOf(e) === 404) return false;
    throw e;
  }
}

/** The HTTP status of an S3 error (undefined for anything else). */
export function statusOf(e: unknown): number | undefined {
  return (e as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

function partSizeFor(base: number, part: number): number {
  return Math.min(MAX_PART, base * 2 ** Math.floor((part - 1) / 1000));
}

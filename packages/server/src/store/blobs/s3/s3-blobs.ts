import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client, type S3ClientConfig } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { blobError, checkDigest, checkDocumentName, DIGEST, type BlobInfo, type BlobLocation, type BlobStore, type DocumentStore } from '../types.js';
import { MIN_PART } from './multipart.js';
import { exists, statusOf, uploadBlob, type UploadPlan } from './upload.js';

/**
 * Version of the store's layout under its prefix, written to `PREFIX/format` on first use:
 * 1 = blobs at `PREFIX/sha256/HEX`, uploads in flight at `PREFIX/tmp/UUID`, documents at
 * `PREFIX/docs/NAME`.
 */
export const S3_LAYOUT_FORMAT = 1;

export interface S3BlobStoreOptions {
  bucket: string;
  /** Where under the bucket the store lives ('' or 'a/b'): stores with different prefixes never see each other. */
  prefix?: string;
  /** The S3 API's URL when it is not AWS's (MinIO, R2, Ceph: `https://host:port`; http:// is plain text). */
  endpoint?: string;
  /** Path-style addressing (`ENDPOINT/BUCKET/KEY`): default on with an `endpoint`, off for AWS. */
  forcePathStyle?: boolean;
  /** Default: AWS_REGION, AWS_DEFAULT_REGION, then us-east-1 with an `endpoint` (else the SDK's shared config). */
  region?: string;
  /** Default: the AWS SDK's chain (environment, shared config and credentials files, web identity, container, instance). */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  /** Bytes per uploaded part (at least 5 MiB; default 8 MiB): a body no larger is one PutObject. */
  partSize?: number;
  /** Requests in flight at once for one upload or copy (default 4). */
  concurrency?: number;
  /** Largest blob copied with one CopyObject (default 5 GiB, S3's limit); larger ones copy in parts. */
  maxCopySize?: number;
  /** Bytes per part of such a copy (default 512 MiB). */
  copyPartSize?: number;
}

/** A connection to the object store not made by then fails the attempt. */
const CONNECT_TIMEOUT_MS = 5_000;
/**
 * A request whose socket is silent this long fails the attempt (data flowing keeps it alive; so
 * does a reader of a blob that keeps reading: one that stops for this long cuts the stream).
 */
const IDLE_TIMEOUT_MS = 30_000;
/** A server-side copy (CopyObject, UploadPartCopy: up to 5 GiB) may say nothing while it copies. */
const COPY_IDLE_TIMEOUT_MS = 600_000;

/**
 * Blobs in an S3-compatible object store: one object per blob, named by its digest.
 * Only what every S3 implementation has is used (PutObject, GetObject with Range,
 * HeadObject, DeleteObject, CopyObject, ListObjectsV2 with StartAfter, multipart
 * upload and copy; no conditional writes, no checksum headers), so AWS, MinIO, R2
 * and Ceph all serve it. How a put streams: s3/upload.ts.
 *
 * Left behind by a process that died mid-put: an incomplete multipart upload (an
 * AbortIncompleteMultipartUpload lifecycle rule drops it) or a `PREFIX/tmp/` object
 * (an expiry rule on that prefix drops it); neither is ever a blob.
 */
export class S3BlobStore implements BlobStore {
  readonly client: S3Client;
  private readonly copyClient: S3Client;
  readonly bucket: string;
  /** The key prefix, '' or ending in '/'. */
  readonly prefix: string;
  private readonly plan: UploadPlan;
  private formatChecked: Promise<void> | null = null;
  readonly documents: DocumentStore;

  constructor(opts: S3BlobStoreOptions) {
    this.bucket = opts.bucket;
    this.prefix = normalizePrefix(opts.prefix ?? '');
    const partSize = opts.partSize ?? 8 << 20;
    if (partSize < MIN_PART) throw new RangeError(`partSize ${partSize} is under S3's smallest part (${MIN_PART} bytes)`);
    const config: S3ClientConfig = {
      endpoint: opts.endpoint,
      forcePathStyle: opts.forcePathStyle ?? opts.endpoint !== undefined,
      region: opts.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? (opts.endpoint !== undefined ? 'us-east-1' : undefined),
      credentials: opts.credentials,
      // The SDK's default (CRC32 headers and aws-chunked bodies on every upload) is AWS's own;
      // other implementations refuse or mishandle it. The blob's digest is the check that counts.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    };
    // Without these a request across a partition waits for TCP to give up (minutes): a connection
    // not made in 5 s, or a socket silent for IDLE_TIMEOUT_MS, fails the attempt (the SDK tries
    // three times). Server-side copies may be silent while the store copies: their own client.
    this.client = new S3Client({ ...config, requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, socketTimeout: IDLE_TIMEOUT_MS } });
    this.copyClient = new S3Client({ ...config, requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, socketTimeout: COPY_IDLE_TIMEOUT_MS } });
    this.plan = {
      client: this.client, copyClient: this.copyClient, bucket: this.bucket, concurrency: opts.concurrency ?? 4, partSize,
      maxCopySize: opts.maxCopySize ?? 5 * 1024 ** 3, copyPartSize: Math.max(MIN_PART, opts.copyPartSize ?? 512 << 20),
      keyOf: (digest) => this.key(digest),
      tempKey: () => `${this.prefix}tmp/${randomUUID()}`,
    };
    this.documents = this.documentStore();
  }

  /** Documents: one object each at `PREFIX/docs/NAME` (a PutObject replaces one whole). */
  private documentStore(): DocumentStore {
    const base = `${this.prefix}docs/`;
    return {
      put: async (name, body) => {
        checkDocumentName(name);
        await this.ready();
        await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: base + name, Body: body, ContentLength: body.length }));
      },
      get: async (name) => {
        checkDocumentName(name);
        await this.ready();
        try {
          const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: base + name }));
          return Buffer.from(await r.Body!.transformToByteArray());
        } catch (e) {
          if (statusOf(e) === 404) return null;
          throw e;
        }
      },
      list: async (prefix) => {
        await this.ready();
        const out: string[] = [];
        let token: string | undefined;
        do {
          const r = await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: base + prefix, ContinuationToken: token }));
          for (const o of r.Contents ?? []) out.push((o.Key ?? '').slice(base.length));
          token = r.IsTruncated ? r.NextContinuationToken : undefined;
        } while (token);
        return out.sort();
      },
      delete: async (name) => {
        checkDocumentName(name);
        await this.ready();
        if (!(await exists(this.plan, base + name))) return false;
        await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: base + name }));
        return true;
      },
    };
  }

  /** Where a blob lives: `PREFIX/sha256/HEX` (keys sort as digests do, so listing pages in digest order). */
  key(digest: string): string {
    checkDigest(digest);
    return `${this.prefix}sha256/${digest.slice(7)}`;
  }

  async put(body: Readable, options: { expect?: string } = {}): Promise<BlobInfo> {
    if (options.expect !== undefined) checkDigest(options.expect);
    await this.ready();
    return uploadBlob(this.plan, body, options.expect);
  }

  async get(digest: string, range?: { start: number; end: number }): Promise<Readable> {
    const key = this.key(digest);
    await this.ready();
    try {
      const r = await this.client.send(new GetObjectCommand({
        Bucket: this.bucket, Key: key, Range: range ? `bytes=${range.start}-${range.end}` : undefined,
      }));
      return r.Body as Readable;
    } catch (e) {
      if (statusOf(e) === 404) throw blobError('not_found', `no blob ${digest}`);
      // A range that starts past the end: empty, as a file read there is.
      if (statusOf(e) === 416 && range && (await this.stat(digest))) return Readable.from([]);
      throw e;
    }
  }

  /**
   * A presigned GET of the blob. None where curl might not trust what this process trusts: an
   * https URL while NODE_EXTRA_CA_CERTS adds authorities (curl knows only the system's).
   */
  async locate(digest: string, ttlSeconds: number): Promise<BlobLocation | null> {
    const key = this.key(digest);
    await this.ready();
    const url = await getSignedUrl(this.client, new GetObjectCommand({ Bucket: this.bucket, Key: key }), { expiresIn: ttlSeconds });
    if (new URL(url).protocol === 'https:' && process.env.NODE_EXTRA_CA_CERTS) return null;
    return { url };
  }

  async stat(digest: string): Promise<BlobInfo | null> {
    const key = this.key(digest);
    await this.ready();
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
      return { digest, size: r.ContentLength ?? 0 };
    } catch (e) {
      if (statusOf(e) === 404) return null;
      throw e;
    }
  }

  /** A HEAD, then the delete (S3's DeleteObject succeeds whether or not the key existed). */
  async delete(digest: string): Promise<boolean> {
    const key = this.key(digest);
    await this.ready();
    if (!(await exists(this.plan, key))) return false;
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
    return true;
  }

  async list({ after, limit }: { after?: string; limit: number }): Promise<BlobInfo[]> {
    await this.ready();
    const out: BlobInfo[] = [];
    const base = `${this.prefix}sha256/`;
    let startAfter = after === undefined ? undefined : base + after.slice(7);
    let token: string | undefined;
    while (out.length < limit) {
      const r = await this.client.send(new ListObjectsV2Command({
        Bucket: this.bucket, Prefix: base, MaxKeys: Math.min(1000, limit - out.length),
        ...(token ? { ContinuationToken: token } : { StartAfter: startAfter }),
      }));
      for (const o of r.Contents ?? []) {
        const digest = `sha256:${(o.Key ?? '').slice(base.length)}`;
        // Anything else someone put under the prefix is not a blob.
        if (DIGEST.test(digest) && out.length < limit) out.push({ digest, size: o.Size ?? 0 });
      }
      if (!r.IsTruncated || !r.NextContinuationToken) break;
      token = r.NextContinuationToken;
      startAfter = undefined;
    }
    return out;
  }

  /** Checks (once per store) that the prefix holds this layout, writing its format on first use. */
  private ready(): Promise<void> {
    this.formatChecked ??= this.checkFormat().catch((e: unknown) => {
      this.formatChecked = null;
      throw e;
    });
    return this.formatChecked;
  }

  private async checkFormat(): Promise<void> {
    const Key = `${this.prefix}format`;
    let text: string;
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key }));
      text = (await r.Body?.transformToString()) ?? '';
    } catch (e) {
      if ((e as { name?: string }).name === 'NoSuchBucket') {
        throw new Error(`the blob store's bucket ${JSON.stringify(this.bucket)} does not exist (create it first)`, { cause: e });
      }
      if (statusOf(e) !== 404) throw e;
      await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key, Body: `${S3_LAYOUT_FORMAT}\n` }));
      return;
    }
    if (Number(text.trim()) !== S3_LAYOUT_FORMAT) {
      throw new Error(`s3://${this.bucket}/${this.prefix} holds blobs in layout format ${JSON.stringify(text.trim())}; this server knows ${S3_LAYOUT_FORMAT}`);
    }
  }

  /** Closes the client's connections. */
  close(): void {
    this.client.destroy();
    this.copyClient.destroy();
  }
}

/** '' stays ''; 'a/b', '/a/b/' become 'a/b/'. */
function normalizePrefix(prefix: string): string {
  const p = prefix.replace(/^\/+|\/+$/g, '');
  return p === '' ? '' : `${p}/`;
}

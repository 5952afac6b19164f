import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { blobError, checkDigest, checkDocumentName, type BlobInfo, type BlobStore, type DocumentStore } from '../types.js';

/** Blobs in memory, for the fast test tier (it passes the blob store's conformance suite). */
export class MemoryBlobStore implements BlobStore {
  private readonly blobs = new Map<string, Buffer>();
  private readonly docs = new Map<string, Buffer>();
  readonly documents: DocumentStore = {
    put: async (name, body) => { checkDocumentName(name); this.docs.set(name, Buffer.from(body)); },
    get: async (name) => { checkDocumentName(name); const d = this.docs.get(name); return d ? Buffer.from(d) : null; },
    list: async (prefix) => [...this.docs.keys()].filter((n) => n.startsWith(prefix)).sort(),
    delete: async (name) => { checkDocumentName(name); return this.docs.delete(name); },
  };

  async put(body: Readable, options: { expect?: string } = {}): Promise<BlobInfo> {
    if (options.expect !== undefined) checkDigest(options.expect);
    const chunks: Buffer[] = [];
    for await (const c of body) chunks.push(Buffer.from(c as Buffer));
    const data = Buffer.concat(chunks);
    const digest = `sha256:${createHash('sha256').update(data).digest('hex')}`;
    if (options.expect !== undefined && options.expect !== digest) throw blobError('digest_mismatch', `the body's digest is ${digest}, not ${options.expect}`);
    this.blobs.set(digest, data);
    return { digest, size: data.length };
  }

  async get(digest: string, range?: { start: number; end: number }): Promise<Readable> {
    checkDigest(digest);
    const data = this.blobs.get(digest);
    if (!data) throw blobError('not_found', `no blob ${digest}`);
    return Readable.from([range ? data.subarray(range.start, range.end + 1) : data]);
  }

  async stat(digest: string): Promise<BlobInfo | null> {
    checkDigest(digest);
    const data = this.blobs.get(digest);
    return data ? { digest, size: data.length } : null;
  }

  async delete(digest: string): Promise<boolean> {
    checkDigest(digest);
    return this.blobs.delete(digest);
  }

  async list({ after, limit }: { after?: string; limit: number }): Promise<BlobInfo[]> {
    return [...this.blobs.keys()].sort().filter((d) => after === undefined || d > after).slice(0, limit)
      .map((digest) => ({ digest, size: this.blobs.get(digest)!.length }));
  }
}

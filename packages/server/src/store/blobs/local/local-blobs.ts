import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, mkdirSync } from 'node:fs';
import { mkdir, open, readFile, readdir, rename, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import { newId } from '../../../util/ids.js';
import { blobError, checkDigest, checkDocumentName, type BlobInfo, type BlobStore, type DocumentStore } from '../types.js';
import { unlinkQuiet } from '../../../util/remove.js';

/**
 * Blobs in a local directory: `sha256/AB/HEX` (AB: the first two hex digits,
 * so no directory grows past 256 × what it holds), written to `tmp/` first,
 * synced, then renamed into place, so a blob is either whole or absent.
 * Documents are files below `docs/`, written the same way.
 */
export class LocalBlobStore implements BlobStore {
  readonly documents: DocumentStore;

  constructor(private readonly root: string) {
    mkdirSync(path.join(root, 'tmp'), { recursive: true });
    mkdirSync(path.join(root, 'sha256'), { recursive: true });
    this.documents = new LocalDocuments(root);
  }

  private file(digest: string): string {
    checkDigest(digest);
    const hex = digest.slice(7);
    return path.join(this.root, 'sha256', hex.slice(0, 2), hex);
  }

  localPath(digest: string): string {
    return this.file(digest);
  }

  async put(body: Readable, options: { expect?: string } = {}): Promise<BlobInfo> {
    if (options.expect !== undefined) checkDigest(options.expect);
    const tmp = path.join(this.root, 'tmp', newId('b'));
    const hash = createHash('sha256');
    let size = 0;
    const count = new Transform({ transform(chunk: Buffer, _e, done) { hash.update(chunk); size += chunk.length; done(null, chunk); } });
    try {
      await pipeline(body, count, createWriteStream(tmp));
      const digest = `sha256:${hash.digest('hex')}`;
      if (options.expect !== undefined && options.expect !== digest) throw blobError('digest_mismatch', `the body's digest is ${digest}, not ${options.expect}`);
      const fh = await open(tmp, 'r');
      try { await fh.datasync(); } finally { await fh.close(); }
      const to = this.file(digest);
      mkdirSync(path.dirname(to), { recursive: true });
      await rename(tmp, to);
      return { digest, size };
    } finally {
      await unlinkQuiet(tmp);
    }
  }

  async get(digest: string, range?: { start: number; end: number }): Promise<Readable> {
    const f = this.file(digest);
    if (!existsSync(f)) throw blobError('not_found', `no blob ${digest}`);
    return createReadStream(f, { ...range, highWaterMark: 1 << 20 });
  }

  async stat(digest: string): Promise<BlobInfo | null> {
    try { return { digest, size: (await stat(this.file(digest))).size }; } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  async delete(digest: string): Promise<boolean> {
    const f = this.file(digest);
    if (!existsSync(f)) return false;
    await unlinkQuiet(f);
    return true;
  }

  async list({ after, limit }: { after?: string; limit: number }): Promise<BlobInfo[]> {
    const out: BlobInfo[] = [];
    const from = after?.slice(7) ?? '';
    const dirs = (await readdir(path.join(this.root, 'sha256'))).sort().filter((d) => d >= from.slice(0, 2));
    for (const d of dirs) {
      const names = (await readdir(path.join(this.root, 'sha256', d))).sort().filter((n) => n > from);
      for (const n of names) {
        out.push({ digest: `sha256:${n}`, size: (await stat(path.join(this.root, 'sha256', d, n))).size });
        if (out.length >= limit) return out;
      }
    }
    return out;
  }
}

class LocalDocuments implements DocumentStore {
  private readonly dir: string;

  constructor(private readonly root: string) {
    this.dir = path.join(root, 'docs');
  }

  async put(name: string, body: Buffer): Promise<void> {
    checkDocumentName(name);
    const tmp = path.join(this.root, 'tmp', newId('d'));
    try {
      await writeFile(tmp, body);
      const fh = await open(tmp, 'r');
      try { await fh.datasync(); } finally { await fh.close(); }
      const to = path.join(this.dir, name);
      await mkdir(path.dirname(to), { recursive: true });
      await rename(tmp, to);
    } finally {
      await unlinkQuiet(tmp);
    }
  }

  async get(name: string): Promise<Buffer | null> {
    checkDocumentName(name);
    try { return await readFile(path.join(this.dir, name)); } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'EISDIR' || code === 'ENOTDIR') return null;
      throw e;
    }
  }

  async list(prefix: string): Promise<string[]> {
    // The walk starts at the deepest directory the prefix names whole.
    const base = prefix.includes('/') ? prefix.slice(0, prefix.lastIndexOf('/')) : '';
    if (base !== '') checkDocumentName(base);
    const out: string[] = [];
    const walk = async (rel: string): Promise<void> => {
      let entries;
      try { entries = await readdir(path.join(this.dir, rel), { withFileTypes: true }); } catch { return; }
      for (const e of entries) {
        const name = rel === '' ? e.name : `${rel}/${e.name}`;
        if (e.isDirectory()) await walk(name);
        else if (e.isFile() && name.startsWith(prefix)) out.push(name);
      }
    };
    await walk(base);
    return out.sort();
  }

  async delete(name: string): Promise<boolean> {
    checkDocumentName(name);
    const f = path.join(this.dir, name);
    if (!existsSync(f)) return false;
    await unlinkQuiet(f);
    return true;
  }
}

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import type { BlobStore } from '../../packages/server/src/store/blobs/types.ts';

const body = (s: string | Buffer) => Readable.from([Buffer.from(s)]);
const digestOf = (s: string | Buffer) => `sha256:${createHash('sha256').update(s).digest('hex')}`;
const all = async (r: Readable) => { const c: Buffer[] = []; for await (const x of r) c.push(x as Buffer); return Buffer.concat(c); };

/** The cases every BlobStore backend must pass; `locates`: the backend has `locate` (its URLs are checked too). */
export function blobStoreConformance(name: string, make: () => Promise<{ blobs: BlobStore; done: () => Promise<void> }>, options: { locates?: boolean } = {}) {
  const withStore = (title: string, fn: (b: BlobStore) => Promise<void>) => test(`${name}: ${title}`, async () => {
    const { blobs, done } = await make();
    try { await fn(blobs); } finally { await done(); }
  });

  withStore('put names a blob by its digest; get, ranges and stat read it back', async (b) => {
    const info = await b.put(body('hello blobs'));
    assert.deepEqual(info, { digest: digestOf('hello blobs'), size: 11 });
    assert.equal((await all(await b.get(info.digest))).toString(), 'hello blobs');
    assert.equal((await all(await b.get(info.digest, { start: 6, end: 9 }))).toString(), 'blob');
    assert.equal((await all(await b.get(info.digest, { start: 6, end: 99 }))).toString(), 'blobs', 'a range past the end is cut short');
    assert.equal((await all(await b.get(info.digest, { start: 50, end: 60 }))).length, 0, 'a range after the end is empty');
    assert.deepEqual(await b.stat(info.digest), info);
  });

  withStore('the same bytes are one blob; a large body streams', async (b) => {
    const big = Buffer.alloc(5 << 20, 7);
    const one = await b.put(Readable.from([big.subarray(0, 1 << 20), big.subarray(1 << 20)]));
    const two = await b.put(body(big));
    assert.deepEqual(one, two);
    assert.equal(one.size, 5 << 20);
    assert.equal((await b.list({ limit: 10 })).length, 1);
  });

  withStore('a body that does not match the expected digest is refused and nothing is kept', async (b) => {
    await assert.rejects(b.put(body('tampered'), { expect: digestOf('original') }), (e: { code: string }) => e.code === 'digest_mismatch');
    assert.equal(await b.stat(digestOf('tampered')), null);
    assert.deepEqual(await b.list({ limit: 10 }), []);
    assert.equal((await b.put(body('original'), { expect: digestOf('original') })).digest, digestOf('original'));
  });

  withStore('missing blobs: get fails with not_found, stat is null, delete says false; bad digests are refused', async (b) => {
    const missing = digestOf('nothing');
    await assert.rejects(b.get(missing), (e: { code: string }) => e.code === 'not_found');
    assert.equal(await b.stat(missing), null);
    assert.equal(await b.delete(missing), false);
    await assert.rejects(async () => b.stat('sha256:../../etc/passwd'), (e: { code: string }) => e.code === 'invalid_digest');
  });

  withStore('list pages in digest order; delete removes one', async (b) => {
    const put = await Promise.all(Array.from({ length: 7 }, (_, i) => b.put(body(`blob ${i}`))));
    const sorted = put.map((p) => p.digest).sort();
    const first = await b.list({ limit: 3 });
    const rest = await b.list({ after: first[first.length - 1].digest, limit: 10 });
    assert.deepEqual([...first, ...rest].map((x) => x.digest), sorted);
    assert.equal(await b.delete(sorted[0]), true);
    assert.equal(await b.stat(sorted[0]), null);
    assert.equal((await b.list({ limit: 10 })).length, 6);
  });

  withStore('documents: put replaces one whole, get reads it, list by prefix sorted, delete; blobs and documents never see each other', async (b) => {
    const d = b.documents;
    assert.equal(await d.get('backups/one.json'), null);
    await d.put('backups/one.json', Buffer.from('first'));
    await d.put('backups/one.json', Buffer.from('second'));
    assert.equal((await d.get('backups/one.json'))?.toString(), 'second');
    await d.put('backups/two.json', Buffer.from('2'));
    await d.put('layers/l_a', Buffer.from('a'));
    await d.put('top', Buffer.from(''));
    assert.deepEqual(await d.list('backups/'), ['backups/one.json', 'backups/two.json']);
    assert.deepEqual(await d.list('backups/t'), ['backups/two.json']);
    assert.deepEqual(await d.list(''), ['backups/one.json', 'backups/two.json', 'layers/l_a', 'top']);
    assert.equal((await d.get('top'))?.length, 0, 'an empty document is not an absent one');
    assert.deepEqual(await b.list({ limit: 10 }), [], 'documents are not blobs');
    await b.put(body('a blob'));
    assert.equal((await d.list('')).length, 4, 'blobs are not documents');
    assert.equal(await d.delete('backups/one.json'), true);
    assert.equal(await d.delete('backups/one.json'), false);
    assert.equal(await d.get('backups/one.json'), null);
    for (const bad of ['../x', 'a/../b', '/abs', 'a//b', 'a b', 'a/./b', '']) {
      await assert.rejects(d.put(bad, Buffer.from('x')), (e: { code: string }) => e.code === 'invalid_name', bad);
    }
  });

  if (options.locates) {
    withStore('locate gives a URL whose GET answers the blob, and 404 once it is gone', async (b) => {
      const info = await b.put(body('fetched by url'));
      const where = await b.locate!(info.digest, 60);
      assert.ok(where, 'a URL');
      const r = await fetch(where.url);
      assert.equal(r.status, 200);
      assert.equal(await r.text(), 'fetched by url');
      await b.delete(info.digest);
      assert.equal((await fetch(where.url)).status, 404);
      await assert.rejects(b.locate!('sha256:../x', 60), (e: { code: string }) => e.code === 'invalid_digest');
    });
  }
}

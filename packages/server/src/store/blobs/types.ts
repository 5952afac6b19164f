import type { Readable } from 'node:stream';

/**
 * The blob store: where committed layers (and, in a cluster, machine
 * snapshots) durably live, in the spirit of containerd's content store. A
 * **blob** is an immutable sequence of bytes named by its digest
 * (`sha256:` and 64 hex digits of its SHA-256): putting the same bytes twice
 * stores them once, and a blob never changes once stored. What a blob holds
 * (a packed layer: store/blobs/pack.ts) is the caller's business.
 *
 * Backends: a local directory (embedded), an S3-compatible object store
 * (cluster mode). Every method is safe to call concurrently from many processes.
 */
export interface BlobInfo {
  digest: string;
  size: number;
}

/** Where a program can GET a blob by itself for a while (a presigned URL), its bytes never passing through this process. */
export interface BlobLocation {
  /** An http(s) URL whose GET answers the blob's bytes; it grants that, and nothing else, to whoever holds it. */
  url: string;
}

/** A blob in a file on this host that a program reads whole, with the digest its bytes must have. */
export interface LocalBlob {
  path: string;
  digest: string;
}

/** Where a packed layer comes from: a stream, a URL a program fetches, or a file a program reads. */
export type PackSource = Readable | BlobLocation | LocalBlob;

export interface BlobStore {
  /**
   * Stores `body`, computing its digest as it streams; returns it once the
   * blob is durable. With `expect`, a body whose digest differs is refused
   * (an Error with code `digest_mismatch`) and nothing is kept.
   */
  put(body: Readable, options?: { expect?: string }): Promise<BlobInfo>;
  /**
   * The blob's bytes (from `start` to `end` inclusive; a range past the end is cut short, or empty);
   * an Error with code `not_found` when absent.
   */
  get(digest: string, range?: { start: number; end: number }): Promise<Readable>;
  stat(digest: string): Promise<BlobInfo | null>;
  /**
   * A URL a program (curl) can GET the blob from for `ttlSeconds`, or null where this store
   * cannot give one that works from this host; absent in stores without it. Nothing is checked:
   * a missing blob's URL answers an error (404; 403 where the store hides what it lacks).
   */
  locate?(digest: string, ttlSeconds: number): Promise<BlobLocation | null>;
  /**
   * The file on this host that holds the blob (checked for nothing: it may be missing or
   * damaged), for a program to read it without its bytes crossing this process; absent in
   * stores whose blobs are not local files.
   */
  localPath?(digest: string): string;
  /** Deletes a blob; false when there was none. */
  delete(digest: string): Promise<boolean>;
  /** Blobs in digest order after `after`, at most `limit` (garbage collection pages through them). */
  list(options: { after?: string; limit: number }): Promise<BlobInfo[]>;
  /** Small named documents beside the blobs. */
  readonly documents: DocumentStore;
}

/**
 * Small documents by name beside a store's blobs (a backup's catalog: what names which blobs).
 * A name is `/`-separated segments of `[A-Za-z0-9._-]` (no `.` or `..` segment), at most 512
 * characters; a document is replaced whole (a reader sees the old bytes or the new, never part);
 * unlike a blob it may change and is not checked against any digest.
 */
export interface DocumentStore {
  put(name: string, body: Buffer): Promise<void>;
  /** Its bytes, or null when there is none. */
  get(name: string): Promise<Buffer | null>;
  /** The names that start with `prefix`, sorted. */
  list(prefix: string): Promise<string[]>;
  /** Deletes one; false when there was none. */
  delete(name: string): Promise<boolean>;
}

const DOCUMENT_NAME = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/;

/** Refuses a document name the interface does not allow (an Error with code `invalid_name`). */
export function checkDocumentName(name: string): void {
  if (name.length > 512 || !DOCUMENT_NAME.test(name) || name.split('/').some((s) => s === '.' || s === '..')) {
    throw blobError('invalid_name', `not a document name: ${JSON.stringify(name)}`);
  }
}

export const DIGEST = /^sha256:[0-9a-f]{64}$/;

/**
 * The codes of the Errors blob stores (and layer packs, pack.ts) throw. `fetch_failed`: a fetch
 * by URL that failed for a reason that may pass (a connection refused, cut or stalled; an HTTP
 * 5xx, 408 or 429: util/curl.ts).
 */
export type BlobErrorCode = 'not_found' | 'digest_mismatch' | 'invalid_digest' | 'invalid_name' | 'invalid_pack' | 'unknown_pack_format' | 'fetch_failed';

/** An Error with the code the interface names. */
export function blobError(code: BlobErrorCode, message: string): Error {
  return Object.assign(new Error(message), { code });
}

export function checkDigest(digest: string): void {
  if (!DIGEST.test(digest)) throw blobError('invalid_digest', `not a sha256 digest: ${JSON.stringify(digest)}`);
}

import { createHash } from 'node:crypto';
import { ShellbaseError } from '../../errors.js';
import { formatImageRef, isLoopbackRegistry, registryHost, type ImageRef } from '../ids.js';
import type { RemoteBlob } from '../../runtime/types.js';
import { MANIFEST_ACCEPT, parseJson } from './manifest.js';

/** The most a manifest, index, config or token answer may be. */
const MAX_DOCUMENT = 4 << 20;

export interface RegistryOptions {
  /** Plain HTTP (registries on loopback always are, as Docker does). */
  insecure?: boolean;
  signal?: AbortSignal;
}

export interface FetchedDocument {
  bytes: Buffer;
  doc: unknown;
  mediaType: string;
  digest: string;
}

/**
 * A client of one repository over the Registry HTTP API v2, anonymous: a 401
 * with a Bearer challenge is answered by asking the challenge's realm for a
 * pull token (as Docker Hub wants even for public images), then retried.
 * Blob redirects (to storage) are followed; fetch (and curl, for a located
 * blob) drops the Authorization header when they leave the registry's origin.
 */
export class RegistryClient {
  private token: string | null = null;
  private readonly base: string;
  private readonly name: string;

  constructor(private readonly ref: ImageRef, private readonly opts: RegistryOptions = {}) {
    const scheme = opts.insecure || isLoopbackRegistry(ref.registry) ? 'http' : 'https';
    this.base = `${scheme}://${registryHost(ref.registry)}/v2/${ref.repository}`;
    this.name = formatImageRef({ registry: ref.registry, repository: ref.repository });
  }

  /** A manifest or index by tag or digest, its digest checked when it was asked for by digest. */
  async manifest(reference: string): Promise<FetchedDocument> {
    const res = await this.get(`${this.base}/manifests/${reference}`, MANIFEST_ACCEPT, `${this.name}:${reference}`);
    const bytes = await readLimited(res, MAX_DOCUMENT, 'manifest');
    const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    if (reference.startsWith('sha256:') && digest !== reference) {
      throw new ShellbaseError('invalid_argument', `the registry sent a manifest whose digest is ${digest}, not ${reference}`, {
        hint: 'the registry is corrupt or not trustworthy', details: { expected: reference, actual: digest },
      });
    }
    const mediaType = (res.headers.get('content-type') ?? '').split(';')[0].trim();
    return { bytes, doc: parseJson(bytes, 'manifest'), mediaType, digest };
  }

  /** A blob's bytes as they arrive (the caller checks its digest). */
  async blob(digest: string): Promise<AsyncIterable<Buffer>> {
    const res = await this.get(`${this.base}/blobs/${digest}`, '*/*', `${this.name}@${digest}`);
    if (!res.body) throw new ShellbaseError('unavailable', `the registry sent no body for blob ${digest}`);
    return res.body as unknown as AsyncIterable<Buffer>;
  }

  /**
   * Whether a program of the host (curl, with the system's CA store) can fetch this registry's
   * blobs as this process would: not an HTTPS registry while NODE_EXTRA_CA_CERTS adds CAs here.
   */
  get locatable(): boolean {
    return !(this.base.startsWith('https:') && process.env.NODE_EXTRA_CA_CERTS);
  }

  /**
   * Where a blob is, for a program that fetches it itself: its URL and the headers to send (the
   * pull token, if the registry wanted one). A HEAD request first (not followed to storage,
   * whose signed URLs may be for GET only) asks for the token and turns a missing blob or a
   * refusal into the same errors as `blob`.
   */
  async locate(digest: string): Promise<RemoteBlob> {
    const url = `${this.base}/blobs/${digest}`;
    const res = await this.get(url, '*/*', `${this.name}@${digest}`, 'HEAD');
    await res.body?.cancel();
    return { url, headers: this.token ? [`Authorization: Bearer ${this.token}`] : [], ...(this.opts.signal ? { signal: this.opts.signal } : {}) };
  }

  /** A small blob (a config) whole, its digest checked. */
  async blobBytes(digest: string): Promise<Buffer> {
    const res = await this.get(`${this.base}/blobs/${digest}`, '*/*', `${this.name}@${digest}`);
    const bytes = await readLimited(res, MAX_DOCUMENT, 'config');
    const actual = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    if (actual !== digest) {
      throw new ShellbaseError('invalid_argument', `blob ${digest} from the registry has digest ${actual}`, {
        hint: 'the registry is corrupt or not trustworthy; nothing was kept', details: { expected: digest, actual },
      });
    }
    return bytes;
  }

  private async get(url: string, accept: string, what: string, method: 'GET' | 'HEAD' = 'GET'): Promise<Response> {
    let res = await this.fetch(url, accept, method);
    // No token yet, or one that expired (pull tokens last minutes; a pull may last longer): one more.
    if (res.status === 401) {
      const challenge = res.headers.get('www-authenticate') ?? '';
      await res.body?.cancel();
      this.token = await this.fetchToken(challenge);
      res = await this.fetch(url, accept, method);
    }
    if (res.ok || (method === 'HEAD' && res.status >= 300 && res.status < 400)) return res;
    const text = (await res.text().catch(() => '')).slice(0, 300);
    if (res.status === 404) {
      throw new ShellbaseError('not_found', `${what} does not exist in the registry`, {
        details: { image: what, registry: this.ref.registry }, hint: 'check the repository name and the tag (`latest` when none is given)',
      });
    }
    if (res.status === 401 || res.status === 403) {
      throw new ShellbaseError('forbidden', `the registry refused access to ${what} (HTTP ${res.status})`, {
        details: { image: what }, hint: 'shellbase pulls anonymously: the image must be public',
      });
    }
    throw new ShellbaseError('unavailable', `the registry answered HTTP ${res.status} for ${what}: ${text}`, { hint: 'try again later' });
  }

  private async fetch(url: string, accept: string, method: 'GET' | 'HEAD' = 'GET'): Promise<Response> {
    const headers: Record<string, string> = { accept };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    try {
      return await fetch(url, { method, headers, signal: this.opts.signal, redirect: method === 'HEAD' ? 'manual' : 'follow' });
    } catch (e) {
      if (this.opts.signal?.aborted) throw e;
      throw unreachable(this.ref.registry, e);
    }
  }

  /** A token from a `Bearer realm=…,service=…,scope=…` challenge, asked for anonymously. */
  private async fetchToken(challenge: string): Promise<string> {
    const m = /^\s*Bearer\s+(.*)$/i.exec(challenge);
    if (!m) {
      throw new ShellbaseError('forbidden', `the registry ${this.ref.registry} wants credentials (${challenge.split(' ')[0] || 'no challenge'})`, {
        hint: 'shellbase pulls anonymously: the image must be public',
      });
    }
    const url = tokenUrl(challenge, m[1], (given) => given ?? `repository:${this.ref.repository}:pull`);
    let res: Response;
    try { res = await fetch(url, { signal: this.opts.signal }); } catch (e) {
      if (this.opts.signal?.aborted) throw e;
      throw unreachable(url.host, e);
    }
    if (!res.ok) {
      throw new ShellbaseError('forbidden', `the registry's token service refused a pull token (HTTP ${res.status})`, {
        hint: 'shellbase pulls anonymously: the image must be public',
      });
    }
    const body = parseJson(await readLimited(res, MAX_DOCUMENT, 'token answer'), 'token answer') as { token?: string; access_token?: string };
    const token = body.token ?? body.access_token;
    if (typeof token !== 'string' || !token) throw new ShellbaseError('unavailable', 'the registry\'s token service sent no token');
    return token;
  }
}

/** Why a registry could not be reached: an unknown host is the caller's mistake, the rest is unavailability. */
/**
 * Where a Bearer challenge's token is asked for: its realm (http or https) with its service and
 * the scope `scope` chooses (given the challenge's own, if any). `params` is the challenge after
 * `Bearer `.
 */
export function tokenUrl(challenge: string, params: string, scope: (given: string | undefined) => string): URL {
  const named = new Map<string, string>();
  for (const p of params.matchAll(/([A-Za-z_]+)="([^"]*)"/g)) named.set(p[1].toLowerCase(), p[2]);
  const realm = named.get('realm');
  if (!realm || !/^https?:\/\//.test(realm)) throw new ShellbaseError('unavailable', `the registry's auth challenge names no realm: ${challenge}`);
  const url = new URL(realm);
  if (named.has('service')) url.searchParams.set('service', named.get('service')!);
  url.searchParams.set('scope', scope(named.get('scope')));
  return url;
}

export function unreachable(host: string, e: unknown): ShellbaseError {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  const code = cause?.code ?? '';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME') {
    return new ShellbaseError('invalid_argument', `unknown registry ${host}: the name does not resolve`, {
      details: { registry: host }, hint: 'check the registry part of the image reference', cause: e,
    });
  }
  return new ShellbaseError('unavailable', `cannot reach the registry ${host}: ${code || cause?.message || (e as Error).message}`, {
    details: { registry: host }, hint: 'check that the registry runs and that this host reaches it (pass insecure for a plain-HTTP registry)', cause: e,
  });
}

export async function readLimited(res: Response, max: number, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of (res.body ?? []) as AsyncIterable<Uint8Array>) {
    n += c.length;
    if (n > max) throw new ShellbaseError('invalid_argument', `the registry's ${what} is larger than ${max} bytes`, { hint: 'the registry does not hold an image there' });
    chunks.push(Buffer.from(c));
  }
  return Buffer.concat(chunks);
}

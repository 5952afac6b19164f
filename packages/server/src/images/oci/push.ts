import { createReadStream } from 'node:fs';
import { ShellbaseError } from '../../errors.js';
import { formatImageRef, isLoopbackRegistry, registryHost, type ImageRef } from '../ids.js';
import { parseJson } from './manifest.js';
import { readLimited, tokenUrl, unreachable } from './registry.js';

/** A registry's user name and password (or token as the password). */
export interface RegistryCredentials {
  username: string;
  password: string;
}

export interface PushOptions {
  credentials?: RegistryCredentials;
  /** Plain HTTP (registries on loopback always are, as for pulls). */
  insecure?: boolean;
  signal?: AbortSignal;
}

/**
 * A client that pushes to one repository over the Registry HTTP API v2: blobs as monolithic
 * uploads (POST, then PUT with the digest), a blob the registry has already skipped (HEAD), the
 * manifest last under its tag. Authentication follows the pull side's rules: anonymous first; a
 * 401 with a Bearer challenge is answered by asking its realm for a token with `pull,push` scope
 * (with the credentials as basic authentication when given), a Basic challenge with the
 * credentials themselves.
 */
export class RegistryPusher {
  private auth: string | null = null;
  private readonly origin: string;
  private readonly base: string;
  private readonly name: string;

  constructor(private readonly ref: ImageRef, private readonly opts: PushOptions = {}) {
    const scheme = opts.insecure || isLoopbackRegistry(ref.registry) ? 'http' : 'https';
    this.origin = `${scheme}://${registryHost(ref.registry)}`;
    this.base = `${this.origin}/v2/${ref.repository}`;
    this.name = formatImageRef({ registry: ref.registry, repository: ref.repository });
  }

  /** Whether the registry lets this caller push here: an upload started and cancelled (credentials asked for as needed). */
  async probe(): Promise<void> {
    const start = await this.send('POST', `${this.base}/blobs/uploads/`);
    await start.body?.cancel();
    const location = start.headers.get('location');
    if (start.status !== 202 || !location) throw await this.refused(start, 'a blob upload');
    const del = await this.send('DELETE', new URL(location, this.origin).toString());
    await del.body?.cancel();
  }

  /** Whether the repository holds the blob already. */
  async has(digest: string): Promise<boolean> {
    const res = await this.send('HEAD', `${this.base}/blobs/${digest}`);
    await res.body?.cancel();
    if (res.status === 200) return true;
    if (res.status === 404) return false;
    throw await this.refused(res, `blob ${digest}`);
  }

  /** Uploads a blob from a file (its digest and size known), unless the repository has it. */
  async blob(digest: string, size: number, file: string): Promise<void> {
    if (await this.has(digest)) return;
    const start = await this.send('POST', `${this.base}/blobs/uploads/`);
    await start.body?.cancel();
    if (start.status !== 202 || !start.headers.get('location')) throw await this.refused(start, 'a blob upload');
    const url = new URL(start.headers.get('location')!, this.origin);
    url.searchParams.set('digest', digest);
    const put = await this.send('PUT', url.toString(), {
      body: createReadStream(file, { highWaterMark: 1 << 20 }), type: 'application/octet-stream', length: size,
    });
    await put.body?.cancel();
    if (put.status !== 201) throw await this.refused(put, `blob ${digest}`);
  }

  /** Puts the manifest under `reference` (a tag); returns its digest as the registry computed it. */
  async manifest(reference: string, bytes: Buffer, mediaType: string): Promise<string | null> {
    const res = await this.send('PUT', `${this.base}/manifests/${reference}`, { body: bytes, type: mediaType, length: bytes.length });
    await res.body?.cancel();
    if (res.status !== 201) throw await this.refused(res, `the manifest ${this.name}:${reference}`);
    return res.headers.get('docker-content-digest');
  }

  private async send(method: string, url: string, body?: { body: Buffer | NodeJS.ReadableStream; type: string; length: number }): Promise<Response> {
    let res = await this.fetch(method, url, body);
    if (res.status === 401 && !(body && !Buffer.isBuffer(body.body))) {
      await res.body?.cancel();
      this.auth = await this.authorize(res.headers.get('www-authenticate') ?? '');
      res = await this.fetch(method, url, body);
    }
    return res;
  }

  private async fetch(method: string, url: string, body?: { body: Buffer | NodeJS.ReadableStream; type: string; length: number }): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.auth) headers.authorization = this.auth;
    if (body) { headers['content-type'] = body.type; headers['content-length'] = String(body.length); }
    try {
      return await fetch(url, {
        method, headers, signal: this.opts.signal, redirect: 'manual',
        ...(body ? { body: body.body as unknown as BodyInit, duplex: 'half' } as RequestInit : {}),
      });
    } catch (e) {
      if (this.opts.signal?.aborted) throw e;
      throw unreachable(this.ref.registry, e);
    }
  }

  /** The Authorization header a challenge asks for. */
  private async authorize(challenge: string): Promise<string> {
    const creds = this.opts.credentials;
    const basic = creds ? `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}` : null;
    if (/^\s*Basic\b/i.test(challenge)) {
      if (basic) return basic;
      throw new ShellbaseError('forbidden', `the registry ${this.ref.registry} wants credentials`, { hint: 'pass credentials: {username, password}' });
    }
    const m = /^\s*Bearer\s+(.*)$/i.exec(challenge);
    if (!m) throw new ShellbaseError('forbidden', `the registry ${this.ref.registry} refused access (${challenge.split(' ')[0] || 'no challenge'})`);
    const url = tokenUrl(challenge, m[1], () => `repository:${this.ref.repository}:pull,push`);
    let res: Response;
    try { res = await fetch(url, { headers: basic ? { authorization: basic } : {}, signal: this.opts.signal }); } catch (e) {
      if (this.opts.signal?.aborted) throw e;
      throw unreachable(url.host, e);
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new ShellbaseError('forbidden', `the registry's token service refused a push token (HTTP ${res.status})`, {
        hint: creds ? 'check the credentials' : 'pass credentials: {username, password}',
      });
    }
    const body = parseJson(await readLimited(res, 4 << 20, 'token answer'), 'token answer') as { token?: string; access_token?: string };
    const token = body.token ?? body.access_token;
    if (typeof token !== 'string' || !token) throw new ShellbaseError('unavailable', 'the registry\'s token service sent no token');
    return `Bearer ${token}`;
  }

  /** The typed error for an answer the push cannot go on from. */
  private async refused(res: Response, what: string): Promise<ShellbaseError> {
    const text = res.bodyUsed ? '' : (await res.text().catch(() => '')).slice(0, 300);
    const details = { image: this.name, status: res.status };
    if (res.status === 401 || res.status === 403) {
      return new ShellbaseError('forbidden', `the registry refused to store ${what} in ${this.name} (HTTP ${res.status})`, {
        details, hint: this.opts.credentials ? 'check that the credentials may push there' : 'pass credentials: {username, password}',
      });
    }
    if (res.status === 404 || res.status === 400 || res.status === 405) {
      return new ShellbaseError('invalid_argument', `the registry refused ${what} for ${this.name} (HTTP ${res.status}) ${text}`.trim(), {
        details, hint: 'check the repository name; the registry may not accept pushes there',
      });
    }
    return new ShellbaseError('unavailable', `the registry answered HTTP ${res.status} for ${what}: ${text}`, { details, hint: 'try again later' });
  }
}

import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync, zstdCompressSync } from 'node:zlib';
import { closedPort, sleep } from './harness.ts';

/** Test images: layers (tar bytes, compressed as asked) and a config, pushed over the Registry HTTP API v2. */
export interface ImageSpec {
  layers: Buffer[];
  compression?: 'gzip' | 'zstd' | 'none';
  config?: { Env?: string[]; WorkingDir?: string; User?: string; Cmd?: string[]; Entrypoint?: string[]; ExposedPorts?: Record<string, object> };
  os?: string;
  architecture?: string;
  /** Diff ids as the config states them (default: the layers' own). */
  diffIds?: string[];
  /** Changes each compressed blob before it is pushed (a corrupt stream whose digest still matches). */
  mangle?: (blob: Buffer) => Buffer;
}

export interface Pushed { digest: string; size: number; layers: { digest: string; size: number; diffId: string }[] }

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const MEDIA = {
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  index: 'application/vnd.oci.image.index.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layer: { gzip: 'application/vnd.oci.image.layer.v1.tar+gzip', zstd: 'application/vnd.oci.image.layer.v1.tar+zstd', none: 'application/vnd.oci.image.layer.v1.tar' },
};

/** Debian's docker-registry (the CNCF distribution registry) on a loopback port, its storage in a temp dir. */
export class TestRegistry {
  private constructor(readonly host: string, private readonly child: ChildProcess, private readonly dir: string) {}

  get url(): string { return `http://${this.host}`; }

  static async start(): Promise<TestRegistry> {
    const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-registry-'));
    const port = await closedPort();
    const config = path.join(dir, 'config.yml');
    writeFileSync(config, [
      'version: 0.1', 'log:', '  level: error', '  accesslog:', '    disabled: true',
      'storage:', '  filesystem:', `    rootdirectory: ${dir}/data`, '  delete:', '    enabled: true',
      'http:', `  addr: 127.0.0.1:${port}`, '  secret: shellbase-test',
    ].join('\n'));
    const child = spawn('docker-registry', ['serve', config], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr!.on('data', (c: Buffer) => { err += c.toString(); });
    const r = new TestRegistry(`127.0.0.1:${port}`, child, dir);
    for (let i = 0; ; i++) {
      if (child.exitCode !== null) throw new Error(`docker-registry exited: ${err}`);
      try { if ((await fetch(`${r.url}/v2/`)).ok) break; } catch { /* not yet */ }
      if (i > 200) { await r.close(); throw new Error(`docker-registry did not start: ${err}`); }
      await sleep(50);
    }
    return r;
  }

  async blob(repo: string, data: Buffer): Promise<{ digest: string; size: number }> {
    const digest = sha(data);
    const start = await fetch(`${this.url}/v2/${repo}/blobs/uploads/`, { method: 'POST' });
    if (start.status !== 202) throw new Error(`upload start: ${start.status} ${await start.text()}`);
    const loc = new URL(start.headers.get('location')!, this.url);
    loc.searchParams.set('digest', digest);
    const put = await fetch(loc, { method: 'PUT', body: data, headers: { 'content-type': 'application/octet-stream' } });
    if (put.status !== 201) throw new Error(`upload: ${put.status} ${await put.text()}`);
    return { digest, size: data.length };
  }

  async manifest(repo: string, ref: string, doc: object, mediaType: string): Promise<{ digest: string; size: number }> {
    const body = Buffer.from(JSON.stringify(doc));
    const res = await fetch(`${this.url}/v2/${repo}/manifests/${ref}`, { method: 'PUT', body, headers: { 'content-type': mediaType } });
    if (res.status !== 201) throw new Error(`manifest: ${res.status} ${await res.text()}`);
    return { digest: sha(body), size: body.length };
  }

  /** Pushes an image (its blobs, config and manifest) as repo:tag. */
  async push(repo: string, tag: string, spec: ImageSpec): Promise<Pushed> {
    const c = spec.compression ?? 'gzip';
    const layers = [];
    for (const tarBytes of spec.layers) {
      const packed = c === 'gzip' ? gzipSync(tarBytes) : c === 'zstd' ? zstdCompressSync(tarBytes) : tarBytes;
      const blob = spec.mangle ? spec.mangle(packed) : packed;
      layers.push({ ...(await this.blob(repo, blob)), diffId: sha(tarBytes) });
    }
    const config = Buffer.from(JSON.stringify({
      architecture: spec.architecture ?? 'amd64', os: spec.os ?? 'linux', config: spec.config ?? {},
      rootfs: { type: 'layers', diff_ids: spec.diffIds ?? layers.map((l) => l.diffId) },
    }));
    const cfg = await this.blob(repo, config);
    const m = await this.manifest(repo, tag, {
      schemaVersion: 2, mediaType: MEDIA.manifest, config: { mediaType: MEDIA.config, ...cfg },
      layers: layers.map((l) => ({ mediaType: MEDIA.layer[c], digest: l.digest, size: l.size })),
    }, MEDIA.manifest);
    return { ...m, layers };
  }

  /** Pushes an index naming manifests already pushed, each with its platform. */
  async pushIndex(repo: string, tag: string, entries: { digest: string; size: number; os: string; architecture: string }[]): Promise<{ digest: string }> {
    return this.manifest(repo, tag, {
      schemaVersion: 2, mediaType: MEDIA.index,
      manifests: entries.map((e) => ({ mediaType: MEDIA.manifest, digest: e.digest, size: e.size, platform: { os: e.os, architecture: e.architecture } })),
    }, MEDIA.index);
  }

  async close(): Promise<void> {
    if (this.child.exitCode === null) {
      const exited = new Promise((r) => this.child.once('exit', r));
      this.child.kill('SIGTERM');
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * A token realm in front of a registry, as Docker Hub's: /v2/ requests without
 * the token get 401 and a Bearer challenge naming /token, which hands out the
 * token; with it they pass through. `tamper` flips a byte of every blob sent;
 * `grow` sends every blob with bytes more than it has; `redirect` answers blob
 * requests with a 307 to /storage/… on another host name (localhost), which
 * serves them without a token and records the Authorization it was sent; while `cut` is above 0
 * a layer's GET gets half its bytes and a closed connection (`cut` counts down), and
 * `blobGets` counts the layers' GETs.
 */
export class TokenProxy {
  tokensIssued: string[] = [];
  tamper = false;
  grow = false;
  redirect = false;
  storageAuth: (string | undefined)[] = [];
  cut = 0;
  blobGets = 0;

  private constructor(private readonly server: Server, readonly host: string) {}

  static async start(upstream: string): Promise<TokenProxy> {
    const port = await closedPort();
    let self: TokenProxy | null = null;
    const server = createServer((req, res) => {
      void (async () => {
        const url = new URL(req.url ?? '/', `http://127.0.0.1:${port}`);
        if (url.pathname === '/token') {
          self!.tokensIssued.push(url.searchParams.get('scope') ?? '');
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token: 'test-token' }));
          return;
        }
        const storage = url.pathname.startsWith('/storage/');
        if (storage) self!.storageAuth.push(req.headers.authorization);
        else if (self!.redirect && url.pathname.includes('/blobs/') && req.headers.authorization === 'Bearer test-token') {
          res.writeHead(307, { location: `http://localhost:${port}/storage${url.pathname}` }).end();
          return;
        }
        if (!storage && req.headers.authorization !== 'Bearer test-token') {
          res.writeHead(401, {
            'www-authenticate': `Bearer realm="http://127.0.0.1:${port}/token",service="test-registry",scope="repository:${url.pathname.split('/').slice(2, -2).join('/')}:pull"`,
            'content-type': 'application/json',
          }).end('{"errors":[{"code":"UNAUTHORIZED"}]}');
          return;
        }
        const upPath = storage ? url.pathname.slice('/storage'.length) : url.pathname;
        const up = await fetch(`${upstream}${upPath}${url.search}`, { method: req.method, headers: { accept: req.headers.accept ?? '*/*' } });
        let body = Buffer.from(await up.arrayBuffer());
        if (self!.tamper && url.pathname.includes("/blobs/") && body.length > 600) body[Math.floor(body.length / 2)] ^= 0xff;
        if (self!.grow && url.pathname.includes('/blobs/') && req.method === 'GET' && body.length > 600) body = Buffer.concat([body, Buffer.alloc(4096)]);
        const headers: Record<string, string> = {};
        for (const h of ['content-type', 'docker-content-digest']) { const v = up.headers.get(h); if (v) headers[h] = v; }
        const layer = url.pathname.includes('/blobs/') && req.method === 'GET' && body.length > 600;
        if (layer) self!.blobGets++;
        if (layer && self!.cut > 0) {
          self!.cut--;
          res.writeHead(up.status, { ...headers, 'content-length': String(body.length) });
          res.write(body.subarray(0, body.length >> 1), () => res.destroy());
          return;
        }
        res.writeHead(up.status, headers).end(body);
      })().catch((e: unknown) => res.writeHead(500).end(String(e)));
    });
    await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
    self = new TokenProxy(server, `127.0.0.1:${port}`);
    return self;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }
}

import type { VersionOf } from './export.js';
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { constants as zc, createGzip } from 'node:zlib';
import type { ContextConfig, ContextDefaults } from '@shellbase/protocol';
import { ShellbaseError, invalid, notFound } from '../../errors.js';
import type { Caller, Deps } from '../../core/deps.js';
import { checkName } from '../../core/validate.js';
import { parseImageRef, type ImageRef } from '../../images/ids.js';
import { ociLayerTar } from '../../images/oci/layer-tar.js';
import { MEDIA, PLATFORM } from '../../images/oci/manifest.js';
import { RegistryPusher, type RegistryCredentials } from '../../images/oci/push.js';
import { DEFAULT_PATH } from '../../runtime/index.js';
import { parseImageLayer } from '../../store/layer-ids.js';
import type { VersionRow } from '../../store/metadata/types.js';
import type { LayerTarring, Snapshotter } from '../../store/snapshotter/types.js';
import { TAR_END, tarPadding } from '../../util/tar.js';
import { tarHeader } from './format.js';

/**
 * A context's version as an OCI image (docs/formats.md, "OCI export"): one gzip layer per layer
 * of the version, bottom first (a built-in image's included), in OCI form (images/oci/layer-tar.ts);
 * a config of the context's defaults and config; an image manifest. Written as an image layout
 * (a tar of one, streamed) or pushed to a registry.
 */
export interface OciExportOptions {
  /** That version instead of the head. */
  version?: string;
  /** The layout's tag (`org.opencontainers.image.ref.name`; default `latest`). */
  tag?: string;
}

export interface OciPushOptions {
  version?: string;
  /** Where to: `registry/repository:tag`. */
  ref: string;
  credentials?: RegistryCredentials;
  /** Plain HTTP to a registry off loopback. */
  insecure?: boolean;
}

export interface OciPushResult { ref: string; digest: string; layers: number }

const CONFIG_MEDIA = 'application/vnd.oci.image.config.v1+json';
const LAYER_MEDIA = 'application/vnd.oci.image.layer.v1.tar+gzip';
const REF_NAME = 'org.opencontainers.image.ref.name';
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;


interface Blob { digest: string; size: number }
interface Plan { tarring: LayerTarring; version: VersionRow; defaults?: ContextDefaults; config?: ContextConfig; tmp: string }

function tarringOf(s: Snapshotter): LayerTarring {
  const t = s as Partial<LayerTarring>;
  if (typeof t.tarLayer !== 'function') {
    throw new ShellbaseError('failed_precondition', 'this server\'s layer store cannot read layers as tars, so contexts cannot be exported as OCI images here', {
      hint: 'export on an embedded server (btrfs layer store)',
    });
  }
  return t as LayerTarring;
}

async function planOf(deps: Deps, versionOf: VersionOf, caller: Caller, name: string, version?: string): Promise<Plan> {
  const tarring = tarringOf(deps.snapshotter);
  checkName(name);
  const ctx = await deps.metadata.contexts.get(caller.tenantId, name);
  if (!ctx) throw notFound('context', name);
  const v = await versionOf(caller, version ?? ctx.head);
  return { tarring, version: v, ...(ctx.defaults ? { defaults: ctx.defaults } : {}), ...(ctx.config ? { config: ctx.config } : {}), tmp: path.join(deps.config.home, 'tmp') };
}

const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

function tap(hash: ReturnType<typeof createHash>, count: (n: number) => void = () => undefined): Transform {
  return new Transform({ transform(c: Buffer, _e, done) { hash.update(c); count(c.length); done(null, c); } });
}

/**
 * The image being made: `layers()` yields each layer's blob spooled to a file (deleted when the
 * next is asked for); once they are all yielded, `documents()` gives the config and manifest.
 */
class OciImage {
  private readonly blobs: (Blob & { diffId: string })[] = [];

  constructor(private readonly plan: Plan, private readonly dir: string) {}

  async *layers(): AsyncGenerator<Blob & { file: string }> {
    for (const id of this.plan.version.layers) {
      const file = path.join(this.dir, 'layer.tar.gz');
      const diff = createHash('sha256');
      const blob = createHash('sha256');
      let size = 0;
      // gzip as Docker and most registries expect; the same tar and level make the same bytes.
      await pipeline(Readable.from(ociLayerTar(this.plan.tarring.tarLayer(id))), tap(diff),
        createGzip({ level: zc.Z_DEFAULT_COMPRESSION }), tap(blob, (n) => { size += n; }), createWriteStream(file));
      const layer = { digest: `sha256:${blob.digest('hex')}`, size, diffId: `sha256:${diff.digest('hex')}` };
      this.blobs.push(layer);
      yield { ...layer, file };
      await rm(file, { force: true });
    }
  }

  documents(): { config: Buffer; manifest: Buffer } {
    const v = this.plan.version;
    const d = this.plan.defaults ?? {};
    const c = this.plan.config ?? {};
    const env = { ...(d.env ?? {}) };
    if (env.PATH === undefined) env.PATH = DEFAULT_PATH;
    const history = v.layers.map((id) => {
      const image = parseImageLayer(id);
      return { created: v.createdAt, created_by: image ? `shellbase image ${image.name}:${image.tag}` : `shellbase layer ${id}` };
    });
    const config = Buffer.from(JSON.stringify({
      created: v.createdAt, architecture: PLATFORM.architecture, os: PLATFORM.os,
      config: {
        Env: Object.entries(env).map(([k, val]) => `${k}=${val}`),
        ...(d.cwd ? { WorkingDir: d.cwd } : {}), ...(d.user ? { User: d.user } : {}),
        ...(c.entrypoint ? { Entrypoint: c.entrypoint } : {}), ...(c.cmd ? { Cmd: c.cmd } : {}),
        ...(c.exposedPorts ? { ExposedPorts: Object.fromEntries(c.exposedPorts.map((p) => [p, {}])) } : {}),
        Labels: { ...(c.labels ?? {}), 'dev.shellbase.version': v.id },
      },
      rootfs: { type: 'layers', diff_ids: this.blobs.map((b) => b.diffId) },
      history,
    }));
    const manifest = Buffer.from(JSON.stringify({
      schemaVersion: 2, mediaType: MEDIA.ociManifest,
      config: { mediaType: CONFIG_MEDIA, digest: sha(config), size: config.length },
      layers: this.blobs.map((b) => ({ mediaType: LAYER_MEDIA, digest: b.digest, size: b.size })),
    }));
    return { config, manifest };
  }
}

async function scratchDir(tmp: string): Promise<string> {
  await mkdir(tmp, { recursive: true });
  return mkdtemp(path.join(tmp, 'oci-'));
}

/**
 * The version as an OCI image layout, a tar of `oci-layout`, `blobs/sha256/…` (layers as they are
 * made, then the config and the manifest) and `index.json` last, naming the manifest under `tag`.
 * What is asked for is checked before a byte is sent; a failure later cuts the stream short.
 */
export async function exportOciLayout(deps: Deps, versionOf: VersionOf, caller: Caller, name: string, opts: OciExportOptions): Promise<Readable> {
  const tag = opts.tag ?? 'latest';
  if (!TAG.test(tag)) throw invalid(`bad tag ${JSON.stringify(tag)}`, 'a tag is letters, digits, `_`, `.` and `-`, at most 128, not starting with `.` or `-`');
  const plan = await planOf(deps, versionOf, caller, name, opts.version);
  return Readable.from(layout(plan, tag), { objectMode: false });
}

async function* layout(plan: Plan, tag: string): AsyncGenerator<Buffer> {
  const mtime = Math.floor(Date.parse(plan.version.createdAt) / 1000);
  function* entry(name: string, body: Buffer): Generator<Buffer> {
    yield tarHeader(name, body.length, mtime);
    yield body;
    yield tarPadding(body.length);
  }
  const blobName = (digest: string): string => `blobs/sha256/${digest.slice('sha256:'.length)}`;
  yield* entry('oci-layout', Buffer.from(JSON.stringify({ imageLayoutVersion: '1.0.0' })));
  const dir = await scratchDir(plan.tmp);
  try {
    const image = new OciImage(plan, dir);
    for await (const l of image.layers()) {
      yield tarHeader(blobName(l.digest), l.size, mtime);
      for await (const c of createReadStream(l.file, { highWaterMark: 1 << 20 })) yield c as Buffer;
      yield tarPadding(l.size);
    }
    const { config, manifest } = image.documents();
    yield* entry(blobName(sha(config)), config);
    yield* entry(blobName(sha(manifest)), manifest);
    yield* entry('index.json', Buffer.from(JSON.stringify({
      schemaVersion: 2, mediaType: MEDIA.ociIndex,
      manifests: [{ mediaType: MEDIA.ociManifest, digest: sha(manifest), size: manifest.length, annotations: { [REF_NAME]: tag } }],
    })));
    yield TAR_END;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The reference a push goes to: a tag, no digest (the manifest's digest is known only once made). */
function pushRef(text: string): ImageRef {
  const ref = parseImageRef(text);
  if (!ref || ref.digest) {
    throw invalid(`bad image reference ${JSON.stringify(text)}`, 'pass registry/repository:tag, e.g. 127.0.0.1:5000/team/app:1', { ref: text });
  }
  return ref;
}

/**
 * Pushes the version as an image: the registry's consent is asked first (an upload started and
 * cancelled), then each layer is made and uploaded (or skipped when the registry has it), the
 * config, and the manifest under the reference's tag: until that last step the tag is unchanged.
 */
export async function pushOci(deps: Deps, versionOf: VersionOf, caller: Caller, name: string, opts: OciPushOptions): Promise<OciPushResult> {
  const ref = pushRef(opts.ref);
  const plan = await planOf(deps, versionOf, caller, name, opts.version);
  const pusher = new RegistryPusher(ref, { ...(opts.credentials ? { credentials: opts.credentials } : {}), ...(opts.insecure ? { insecure: true } : {}) });
  await pusher.probe();
  const dir = await scratchDir(plan.tmp);
  try {
    const image = new OciImage(plan, dir);
    for await (const l of image.layers()) await pusher.blob(l.digest, l.size, l.file);
    const { config, manifest } = image.documents();
    const configFile = path.join(dir, 'config.json');
    await writeFile(configFile, config);
    await pusher.blob(sha(config), config.length, configFile);
    const tag = ref.tag ?? 'latest';
    await pusher.manifest(tag, manifest, MEDIA.ociManifest);
    return { ref: `${ref.registry}/${ref.repository}:${tag}`, digest: sha(manifest), layers: plan.version.layers.length };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

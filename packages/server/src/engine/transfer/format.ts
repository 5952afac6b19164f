import type { ContextConfig, ContextDefaults, NetworkPolicy, VersionCause } from '@shellbase/protocol';
import { ShellbaseError, invalid } from '../../errors.js';
import type { Change } from '../../store/snapshotter/types.js';

/**
 * The context archive (`shellbase export`, docs/formats.md), format 2: a POSIX tar of
 *
 * 1. `manifest.json`: a `Manifest` (below), first;
 * 2. each layer the manifest lists, in its order, as a packed layer (store/blobs/pack.ts,
 *    LAYER_PACK_FORMAT: a zstd stream with a header frame) cut into pieces of at most
 *    `PIECE_BYTES`, `layers/ID.zst.0000`, `.0001`, … (their concatenation is the pack), so the
 *    writer streams a layer as it is packed: a tar entry's size comes before its bytes;
 * 3. `SHA256SUMS`: last, in sha256sum's format (`HEX  NAME`), the digest of every part above.
 *
 * Format 1 (read, no longer written) held each layer whole as one entry, `layers/ID.zst`.
 * The digests come last because a layer's packed bytes are known only once packed, and the
 * archive is written in one pass. An archive without its `SHA256SUMS` is incomplete.
 * Built-in images' layers (`image:NAME:TAG`) are not in it: the manifest names the image,
 * and the importing server uses its own build of it.
 */
export const CONTEXT_ARCHIVE_FORMAT = 2;
/** The formats an import reads. */
export const READABLE_FORMATS: readonly number[] = [1, 2];
/** The most bytes of a layer's pack in one entry (what the writer holds before it sends one). */
export const PIECE_BYTES = 8 << 20;
export const ARCHIVE_KIND = 'shellbase.context';
export const MANIFEST = 'manifest.json';
export const SUMS = 'SHA256SUMS';
/** The largest manifest an importer reads (it is held in memory). */
export const MAX_MANIFEST = 256 << 20;

/** A format-1 layer entry's name (the whole pack). */
export const layerEntry = (layerId: string): string => `layers/${layerId}.zst`;
/** The name of a layer's pieces (format 2) before their number. */
export const piecePrefix = (layerId: string): string => `layers/${layerId}.zst.`;
/** The name of piece `i` of a layer's pack (format 2): the prefix and `i` in four digits or more. */
export const pieceEntry = (layerId: string, i: number): string => `${piecePrefix(layerId)}${String(i).padStart(4, '0')}`;

export interface ManifestLayer {
  id: string;
  kind: 'exec' | 'squash' | 'import';
  /** Bytes of file data in the layer. */
  bytes: number;
  /** An OCI layer's diff_id. */
  digest?: string;
}

export interface ManifestVersion {
  id: string;
  /** Null where its parent is not in the archive (and is no built-in image's root version). */
  parent: string | null;
  merged: string | null;
  createdAt: string;
  cause: VersionCause;
  bytes: number;
  /** Bottom first. */
  layers: string[];
  /** The paths it changed over its parent; null when unknown (its parent is not in the archive). */
  changes: Change[] | null;
}

export interface Manifest {
  kind: typeof ARCHIVE_KIND;
  format: number;
  createdAt: string;
  context: {
    name: string;
    image: string;
    head: string;
    defaults?: ContextDefaults;
    config?: ContextConfig;
    network?: NetworkPolicy;
  };
  /** Built-in images the versions stand on: their root version and layer on the exporting server. */
  images: { name: string; version: string; layer: string }[];
  /** Every layer in the archive, in the order their entries follow. */
  layers: ManifestLayer[];
  /** Parents before children. */
  versions: ManifestVersion[];
}

const bad = (why: string): ShellbaseError => invalid(`not a context archive: ${why}`, 'pass a file `shellbase export` wrote');

const isStr = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 512;
const isId = (v: unknown): v is string => isStr(v) && /^[A-Za-z0-9_.:-]+$/.test(v);
/** A stored layer's id (store/layer-ids.ts: `l_…`, `o_…`): what names a directory of the store, never an image's or a path. */
const isLayerId = (v: unknown): v is string => isStr(v) && /^[a-z]_[0-9A-Za-z]+$/.test(v);

/** Parses and checks a manifest's shape; a newer format is refused with `failed_precondition`. */
export function parseManifest(bytes: Buffer): Manifest {
  let m: Partial<Manifest>;
  try { m = JSON.parse(bytes.toString('utf8')) as Partial<Manifest>; } catch { throw bad('its manifest is not JSON'); }
  if (m === null || typeof m !== 'object' || m.kind !== ARCHIVE_KIND) throw bad('its manifest is not a context archive\'s');
  if (typeof m.format !== 'number') throw bad('its manifest has no format');
  if (!READABLE_FORMATS.includes(m.format)) {
    throw new ShellbaseError('failed_precondition', `the archive is of format ${m.format}; this server reads formats ${READABLE_FORMATS.join(' and ')}`, {
      details: { format: m.format, supported: READABLE_FORMATS }, hint: 'import it on a server of the release that wrote it, or a newer one',
    });
  }
  const c = m.context;
  if (!c || !isStr(c.name) || !isStr(c.image) || !isId(c.head)) throw bad('its manifest names no context');
  if (!Array.isArray(m.images) || !Array.isArray(m.layers) || !Array.isArray(m.versions)) throw bad('its manifest lacks images, layers or versions');
  for (const i of m.images) if (!i || !isStr(i.name) || !isId(i.version) || !isId(i.layer)) throw bad('an image of its manifest is malformed');
  const layers = new Set<string>();
  for (const l of m.layers) {
    if (!l || !isLayerId(l.id) || !['exec', 'squash', 'import'].includes(l.kind) || !Number.isSafeInteger(l.bytes) || layers.has(l.id)) throw bad('a layer of its manifest is malformed');
    layers.add(l.id);
  }
  const known = new Set<string>([...layers, ...m.images.map((i) => i.layer)]);
  const versions = new Set<string>(m.images.map((i) => i.version));
  for (const v of m.versions) {
    if (!v || !isId(v.id) || versions.has(v.id) || !Array.isArray(v.layers) || v.layers.length === 0 || !isStr(v.createdAt) || !v.cause || typeof v.cause.kind !== 'string') {
      throw bad('a version of its manifest is malformed');
    }
    for (const p of [v.parent, v.merged]) if (p !== null && !versions.has(p)) throw bad(`version ${v.id} comes before its parent ${String(p)}`);
    for (const l of v.layers) if (!known.has(l)) throw bad(`version ${v.id} names layer ${String(l)}, which the archive lacks`);
    if (v.changes !== null && !Array.isArray(v.changes)) throw bad(`version ${v.id} has a malformed change set`);
    versions.add(v.id);
  }
  if (!versions.has(c.head) || m.images.some((i) => i.version === c.head)) throw bad('its head is not among its versions');
  return m as Manifest;
}

/** `SHA256SUMS`: name → hex digest. */
export function parseSums(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const m = /^([0-9a-f]{64}) [ *](.+)$/.exec(line);
    if (!m) throw bad('its SHA256SUMS is malformed');
    out.set(m[2], m[1]);
  }
  return out;
}

/** A ustar header for a regular file (names up to 100 bytes; sizes past 8 GiB in GNU base-256). */
export function tarHeader(name: string, size: number, mtimeS: number): Buffer {
  const h = Buffer.alloc(512);
  if (Buffer.byteLength(name) > 100) throw new Error(`tar name too long: ${name}`);
  h.write(name, 0, 100, 'utf8');
  const oct = (v: number, off: number, len: number) => h.write(v.toString(8).padStart(len - 1, '0') + '\0', off, len, 'ascii');
  oct(0o644, 100, 8);
  oct(0, 108, 8);
  oct(0, 116, 8);
  if (size < 8 ** 11) oct(size, 124, 12);
  else {
    let v = size;
    for (let i = 135; i > 124; i--) { h[i] = v % 256; v = Math.floor(v / 256); }
    h[124] = 0x80;
  }
  oct(Math.floor(mtimeS), 136, 12);
  h.write('        ', 148, 8, 'ascii');
  h[156] = 0x30; // '0': a regular file
  h.write('ustar\0' + '00', 257, 8, 'ascii');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'ascii');
  return h;
}

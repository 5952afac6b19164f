import { invalid } from '../errors.js';

/**
 * A streaming reader of tar archives (POSIX ustar, pax extended headers, GNU
 * long names): OCI layers, `docker save` and OCI layout archives, build
 * contexts. It never buffers an entry's data: each entry's body is read from
 * the source as the caller consumes it.
 */
export type TarEntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'char' | 'block' | 'fifo' | 'other';

export interface TarHeader {
  /** The name as the archive spells it (pax `path` or a GNU long name when present). */
  name: string;
  /** The name normalized: no leading `/` or `./`, no trailing `/`, `''` for the root. */
  path: string;
  type: TarEntryType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  linkname: string;
}

export interface TarEntry {
  header: TarHeader;
  /** The entry's header blocks as read (its pax or GNU extended headers included). */
  raw: Buffer;
  /** The entry's data; what the caller leaves unread is skipped before the next entry. */
  body: AsyncIterable<Buffer>;
}

const BLOCK = 512;
const TYPES: Record<string, TarEntryType> = {
  '0': 'file', '\0': 'file', '7': 'file', '1': 'hardlink', '2': 'symlink', '3': 'char', '4': 'block', '5': 'dir', '6': 'fifo',
};

/** Bytes of an async source, taken a known amount at a time. */
class Bytes {
  private chunks: Buffer[] = [];
  private length = 0;
  private done = false;
  /** Bytes taken so far (for messages). */
  offset = 0;

  constructor(private readonly it: AsyncIterator<Buffer>) {}

  private async more(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.it.next();
    if (r.done) { this.done = true; return false; }
    const c = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value as Uint8Array);
    if (c.length) { this.chunks.push(c); this.length += c.length; }
    return true;
  }

  /** Exactly `n` bytes, or null at the end of the source. */
  async take(n: number): Promise<Buffer | null> {
    while (this.length < n) if (!(await this.more())) return null;
    const all = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length ? [rest] : [];
    this.length = rest.length;
    this.offset += n;
    return out;
  }

  /** `n` bytes as chunks, as they come. */
  async *stream(n: number): AsyncGenerator<Buffer> {
    while (n > 0) {
      if (this.length === 0 && !(await this.more())) throw invalid('the tar archive ends in the middle of an entry', 'send a whole archive');
      const c = this.chunks[0];
      const part = c.length <= n ? c : c.subarray(0, n);
      if (part === c) this.chunks.shift(); else this.chunks[0] = c.subarray(n);
      this.length -= part.length;
      this.offset += part.length;
      n -= part.length;
      yield part;
    }
  }

  async skip(n: number): Promise<void> {
    for await (const _ of this.stream(n)) { /* dropped */ }
  }

  /** Reads the source to its end (what follows the archive's end marker still counts for digests). */
  async drain(): Promise<void> {
    this.chunks = [];
    this.length = 0;
    while (await this.more()) { this.chunks = []; this.length = 0; }
  }
}

const cstr = (b: Buffer, off: number, len: number): string => {
  const end = b.indexOf(0, off);
  return b.toString('utf8', off, end < 0 || end > off + len ? off + len : end);
};

function num(b: Buffer, off: number, len: number): number {
  if (b[off] & 0x80) {
    // GNU base-256: big-endian, the first byte's top bit set.
    let v = b[off] & 0x7f;
    for (let i = 1; i < len; i++) v = v * 256 + b[off + i];
    return v;
  }
  const s = cstr(b, off, len).trim();
  return s === '' ? 0 : parseInt(s, 8);
}

function checksumOk(h: Buffer): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : h[i];
  return num(h, 148, 8) === sum;
}

/** pax records: `LEN key=value\n`. */
function paxRecords(data: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  let i = 0;
  while (i < data.length) {
    const space = data.indexOf(0x20, i);
    if (space < 0) break;
    const len = Number(data.toString('ascii', i, space));
    if (!Number.isInteger(len) || len <= 0 || i + len > data.length) throw invalid('the tar archive has a malformed pax header', 'send a POSIX tar archive');
    const rec = data.toString('utf8', space + 1, i + len - 1);
    const eq = rec.indexOf('=');
    if (eq > 0) out.set(rec.slice(0, eq), rec.slice(eq + 1));
    i += len;
  }
  return out;
}

/** `a/./b/`, `./a`, `/a` → `a/b`, `a`, `a`; the root is `''`. */
export function normalizeTarPath(name: string): string {
  return name.split('/').filter((s) => s !== '' && s !== '.').join('/');
}

const padOf = (n: number) => (BLOCK - (n % BLOCK)) % BLOCK;

/** The entries of a tar archive read from `source`; the source is read to its end. */
export async function* readTar(source: AsyncIterable<Buffer>): AsyncGenerator<TarEntry> {
  const r = new Bytes(source[Symbol.asyncIterator]());
  let pax = new Map<string, string>();
  const global = new Map<string, string>();
  let longName: string | null = null;
  let longLink: string | null = null;
  let raw: Buffer[] = [];
  for (;;) {
    const h = await r.take(BLOCK);
    if (!h) {
      if (r.offset === 0) throw invalid('the tar archive is empty', 'send a tar archive');
      break; // no end marker: tolerated, as GNU tar does
    }
    if (h.every((b) => b === 0)) break;
    if (!checksumOk(h)) throw invalid(`not a tar archive (bad header checksum at byte ${r.offset - BLOCK})`, 'send a tar archive (gzip or zstd compressed layers are decompressed first)');
    const flag = String.fromCharCode(h[156]);
    let size = num(h, 124, 12);
    raw.push(h);
    if (flag === 'x' || flag === 'g' || flag === 'L' || flag === 'K') {
      const data = await r.take(size + padOf(size));
      if (!data) throw invalid('the tar archive ends in the middle of an entry', 'send a whole archive');
      raw.push(data);
      const body = data.subarray(0, size);
      if (flag === 'x') pax = new Map([...pax, ...paxRecords(body)]);
      else if (flag === 'g') for (const [k, v] of paxRecords(body)) global.set(k, v);
      else if (flag === 'L') longName = cstr(body, 0, body.length);
      else longLink = cstr(body, 0, body.length);
      continue;
    }
    const ext = new Map([...global, ...pax]);
    const magic = h.toString('ascii', 257, 262);
    const prefix = magic === 'ustar' ? cstr(h, 345, 155) : '';
    const name = ext.get('path') ?? longName ?? (prefix ? `${prefix}/${cstr(h, 0, 100)}` : cstr(h, 0, 100));
    if (ext.has('size')) size = Number(ext.get('size'));
    const type = TYPES[flag] ?? 'other';
    const header: TarHeader = {
      name, path: normalizeTarPath(name), type, mode: num(h, 100, 8) & 0o7777,
      uid: ext.has('uid') ? Number(ext.get('uid')) : num(h, 108, 8), gid: ext.has('gid') ? Number(ext.get('gid')) : num(h, 116, 8),
      size: type === 'file' || type === 'other' ? size : 0, mtime: ext.has('mtime') ? Number(ext.get('mtime')) : num(h, 136, 12),
      linkname: ext.get('linkpath') ?? longLink ?? cstr(h, 157, 100),
    };
    if (!Number.isSafeInteger(size) || size < 0) throw invalid(`tar entry ${JSON.stringify(name)} has a bad size`, 'send a tar archive');
    const entryRaw = Buffer.concat(raw);
    pax = new Map();
    longName = null;
    longLink = null;
    raw = [];
    let consumed = 0;
    const body = (async function* () {
      for await (const c of r.stream(size)) { consumed += c.length; yield c; }
    })();
    yield { header, raw: entryRaw, body };
    // Whatever the caller did not read is skipped, then the block's padding.
    if (consumed < size) {
      for await (const c of body) consumed += c.length;
      if (consumed < size) await r.skip(size - consumed);
    }
    await r.skip(padOf(size));
  }
  await r.drain();
}

/** The padding after `size` bytes of data, for writers that pass entries through. */
export function tarPadding(size: number): Buffer {
  return Buffer.alloc(padOf(size));
}

/** The two zero blocks that end an archive. */
export const TAR_END = Buffer.alloc(BLOCK * 2);

/**
 * The SDK's tar writer: POSIX ustar headers, with a pax header first when a name or link target
 * is over 100 bytes or an id does not fit. Works on Uint8Arrays and Blobs only, so it runs in a
 * browser as in Node (Node's `tar` and `tarDirectory` in ../tar.ts are built on it).
 */

/** One entry of a tar archive to write. */
export interface TarInput {
  /** Relative path, `/`-separated. */
  path: string;
  type?: 'file' | 'dir' | 'symlink' | 'hardlink' | 'char' | 'block' | 'fifo';
  data?: Uint8Array | string;
  mode?: number;
  uid?: number;
  gid?: number;
  /** Seconds since the epoch (a fraction is dropped). */
  mtime?: number;
  /** A link's target. */
  linkname?: string;
}

/** An entry of `tarBlob`, whose data may also be a Blob (a browser's File). */
export type TarBlobInput = Omit<TarInput, 'data'> & { data?: Uint8Array | string | Blob };

const BLOCK = 512;
const FLAGS = { file: '0', hardlink: '1', symlink: '2', char: '3', block: '4', dir: '5', fifo: '6' } as const;
const encoder = new TextEncoder();
const byteLength = (s: string) => encoder.encode(s).length;

/** Writes `value` as UTF-8 at `off`, at most `len` bytes (a character that does not fit whole is left out). */
function put(h: Uint8Array, off: number, len: number, value: string): void {
  encoder.encodeInto(value, h.subarray(off, off + len));
}
const octal = (n: number, len: number) => `${Math.max(0, Math.floor(n)).toString(8).padStart(len - 1, '0')}\0`;

function header(name: string, flag: string, size: number, mode: number, uid: number, gid: number, mtime: number, link: string): Uint8Array<ArrayBuffer> {
  const h = new Uint8Array(BLOCK);
  put(h, 0, 100, name);
  put(h, 100, 8, octal(mode & 0o7777, 8));
  put(h, 108, 8, octal(uid, 8));
  put(h, 116, 8, octal(gid, 8));
  put(h, 124, 12, octal(size, 12));
  put(h, 136, 12, octal(mtime, 12));
  h.fill(0x20, 148, 156); // the checksum counts its own field as spaces
  put(h, 156, 1, flag);
  put(h, 157, 100, link);
  put(h, 257, 6, 'ustar');
  put(h, 263, 2, '00');
  let sum = 0;
  for (const b of h) sum += b;
  put(h, 148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
  return h;
}

/** A pax record "LEN key=value\n" (LEN counts itself). */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  const n = byteLength(body);
  let len = n + 1;
  while (String(len).length + n !== len) len = String(len).length + n;
  return `${len}${body}`;
}

/** The zeros that fill `size` bytes of data up to a whole block. */
export const tarPadding = (size: number): Uint8Array<ArrayBuffer> => new Uint8Array((BLOCK - (size % BLOCK)) % BLOCK);

/** The two zero blocks that end an archive. */
export const tarEnd = (): Uint8Array<ArrayBuffer> => new Uint8Array(BLOCK * 2);

/** An entry's header blocks, for `size` bytes of data (a pax header first when a name or target is too long, or an id too large). */
export function tarHeaders(e: Omit<TarInput, 'data'>, size: number): Uint8Array<ArrayBuffer>[] {
  const type = e.type ?? 'file';
  const name = type === 'dir' && !e.path.endsWith('/') ? `${e.path}/` : e.path;
  const link = e.linkname ?? '';
  const mtime = e.mtime ?? Math.floor(Date.now() / 1000);
  const uid = e.uid ?? 0;
  const gid = e.gid ?? 0;
  const out: Uint8Array<ArrayBuffer>[] = [];
  const records = [
    ...(byteLength(name) > 100 ? [paxRecord('path', name)] : []),
    ...(byteLength(link) > 100 ? [paxRecord('linkpath', link)] : []),
    ...(uid > 0o7777777 ? [paxRecord('uid', String(uid))] : []),
    ...(gid > 0o7777777 ? [paxRecord('gid', String(gid))] : []),
  ];
  if (records.length) {
    const pax = encoder.encode(records.join(''));
    out.push(header('PaxHeader', 'x', pax.length, 0o644, 0, 0, mtime, ''), pax, tarPadding(pax.length));
  }
  const mode = e.mode ?? (type === 'dir' ? 0o755 : type === 'symlink' ? 0o777 : 0o644);
  out.push(header(name, FLAGS[type], size, mode, Math.min(uid, 0o7777777), Math.min(gid, 0o7777777), mtime, link));
  return out;
}

const bytesOf = (data: Uint8Array | string | undefined): Uint8Array =>
  data === undefined ? new Uint8Array(0) : typeof data === 'string' ? encoder.encode(data) : data;

/** A whole tar archive of `entries`, in memory (small archives: tests, a few files). */
export function tar(entries: TarInput[]): Uint8Array<ArrayBuffer> {
  const parts: Uint8Array[] = [];
  for (const e of entries) {
    const data = bytesOf(e.data);
    const size = (e.type ?? 'file') === 'file' ? data.length : 0;
    parts.push(...tarHeaders(e, size));
    if (size) parts.push(data, tarPadding(size));
  }
  parts.push(tarEnd());
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

/**
 * The same archive as a Blob (`application/x-tar`). Data given as a Blob is referenced, not read:
 * a browser uploads Files of any size this way without holding them in memory.
 */
export function tarBlob(entries: TarBlobInput[]): Blob {
  const parts: BlobPart[] = [];
  for (const e of entries) {
    const data = e.data instanceof Blob ? e.data : new Uint8Array(bytesOf(e.data));
    const size = (e.type ?? 'file') === 'file' ? (data instanceof Blob ? data.size : data.length) : 0;
    parts.push(...tarHeaders(e, size));
    if (size) parts.push(data, tarPadding(size));
  }
  parts.push(tarEnd());
  return new Blob(parts, { type: 'application/x-tar' });
}

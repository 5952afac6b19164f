/** A POSIX (ustar + pax) tar archive written in the browser: directory downloads and multi-file uploads. */

export interface TarEntry {
  /** Relative path, "/"-separated, no leading slash. */
  path: string;
  type: 'file' | 'dir' | 'symlink';
  mode: number;
  mtime: Date;
  data?: Blob | Uint8Array<ArrayBuffer>;
  target?: string;
}

const enc = new TextEncoder();
const BLOCK = 512;

function field(buf: Uint8Array, off: number, len: number, value: string): void {
  const b = enc.encode(value);
  buf.set(b.subarray(0, len), off);
}
const octal = (n: number, len: number) => n.toString(8).padStart(len - 1, '0');

function header(name: string, type: string, size: number, mode: number, mtime: number, link = ''): Uint8Array<ArrayBuffer> {
  const h = new Uint8Array(BLOCK);
  field(h, 0, 100, name);
  field(h, 100, 8, octal(mode & 0o7777, 8));
  field(h, 108, 8, octal(0, 8));
  field(h, 116, 8, octal(0, 8));
  field(h, 124, 12, octal(size, 12));
  field(h, 136, 12, octal(Math.max(0, Math.floor(mtime)), 12));
  h.fill(0x20, 148, 156); // the checksum counts its own field as spaces
  field(h, 156, 1, type);
  field(h, 157, 100, link);
  field(h, 257, 6, 'ustar');
  field(h, 263, 2, '00');
  let sum = 0;
  for (const b of h) sum += b;
  field(h, 148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
  return h;
}

/** A pax record "LEN key=value\n" (LEN counts itself). */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = enc.encode(body).length + 1;
  while (String(len).length + enc.encode(body).length !== len) len = String(len).length + enc.encode(body).length;
  return `${len}${body}`;
}

const pad = (n: number) => new Uint8Array((BLOCK - (n % BLOCK)) % BLOCK);

/** Entries as a tar Blob; names or link targets over 100 bytes get a pax header. */
export function tar(entries: TarEntry[]): Blob {
  const parts: BlobPart[] = [];
  for (const e of entries) {
    const name = e.type === 'dir' && !e.path.endsWith('/') ? `${e.path}/` : e.path;
    const link = e.target ?? '';
    const mtime = e.mtime.getTime() / 1000;
    if (enc.encode(name).length > 100 || enc.encode(link).length > 100) {
      const pax = enc.encode(paxRecord('path', name) + (link ? paxRecord('linkpath', link) : ''));
      parts.push(header('PaxHeader', 'x', pax.length, 0o644, mtime), pax, pad(pax.length));
    }
    const size = e.type === 'file' ? (e.data instanceof Blob ? e.data.size : e.data?.length ?? 0) : 0;
    const type = e.type === 'file' ? '0' : e.type === 'dir' ? '5' : '2';
    parts.push(header(name.slice(0, 100), type, size, e.mode, mtime, link.slice(0, 100)));
    if (e.type === 'file' && e.data) parts.push(e.data, pad(size));
  }
  parts.push(new Uint8Array(BLOCK * 2));
  return new Blob(parts, { type: 'application/x-tar' });
}

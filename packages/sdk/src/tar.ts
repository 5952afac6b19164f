import { createReadStream, lstatSync, readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';

/** One entry of a tar archive to write. */
export interface TarInput {
  /** Relative path, `/`-separated. */
  path: string;
  type?: 'file' | 'dir' | 'symlink' | 'hardlink' | 'char' | 'block' | 'fifo';
  data?: Uint8Array | string;
  mode?: number;
  uid?: number;
  gid?: number;
  /** Seconds since the epoch. */
  mtime?: number;
  /** A link's target. */
  linkname?: string;
}

const BLOCK = 512;
const FLAGS = { file: '0', hardlink: '1', symlink: '2', char: '3', block: '4', dir: '5', fifo: '6' } as const;

function put(h: Buffer, off: number, len: number, value: string): void {
  h.write(value, off, Math.min(len, Buffer.byteLength(value)), 'utf8');
}
const octal = (n: number, len: number) => `${Math.max(0, Math.floor(n)).toString(8).padStart(len - 1, '0')}\0`;

function header(name: string, flag: string, size: number, mode: number, uid: number, gid: number, mtime: number, link: string): Buffer {
  const h = Buffer.alloc(BLOCK);
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
  const n = Buffer.byteLength(body);
  let len = n + 1;
  while (String(len).length + n !== len) len = String(len).length + n;
  return `${len}${body}`;
}

const pad = (n: number) => Buffer.alloc((BLOCK - (n % BLOCK)) % BLOCK);

/** An entry's header blocks (a pax header first when a name or target is too long, or an id too large). */
function headers(e: TarInput, size: number): Buffer[] {
  const type = e.type ?? 'file';
  const name = type === 'dir' && !e.path.endsWith('/') ? `${e.path}/` : e.path;
  const link = e.linkname ?? '';
  const mtime = e.mtime ?? Math.floor(Date.now() / 1000);
  const uid = e.uid ?? 0;
  const gid = e.gid ?? 0;
  const out: Buffer[] = [];
  const records = [
    ...(Buffer.byteLength(name) > 100 ? [paxRecord('path', name)] : []),
    ...(Buffer.byteLength(link) > 100 ? [paxRecord('linkpath', link)] : []),
    ...(uid > 0o7777777 ? [paxRecord('uid', String(uid))] : []),
    ...(gid > 0o7777777 ? [paxRecord('gid', String(gid))] : []),
  ];
  if (records.length) {
    const pax = Buffer.from(records.join(''));
    out.push(header('PaxHeader', 'x', pax.length, 0o644, 0, 0, mtime, ''), pax, pad(pax.length));
  }
  const mode = e.mode ?? (type === 'dir' ? 0o755 : type === 'symlink' ? 0o777 : 0o644);
  out.push(header(name, FLAGS[type], size, mode, Math.min(uid, 0o7777777), Math.min(gid, 0o7777777), mtime, link));
  return out;
}

/** A whole tar archive of `entries`, in memory (small archives: tests, a few files). */
export function tar(entries: TarInput[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const data = e.data === undefined ? Buffer.alloc(0) : Buffer.from(e.data);
    const size = (e.type ?? 'file') === 'file' ? data.length : 0;
    parts.push(...headers(e, size));
    if (size) parts.push(data, pad(size));
  }
  parts.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(parts);
}

/**
 * A directory as a tar stream (regular files, directories and symlinks; the
 * rest is skipped), read from disk as it is sent. `keep` decides per relative
 * path (a directory it refuses is not entered).
 */
export async function* tarDirectory(dir: string, keep: (rel: string, isDir: boolean) => boolean = () => true): AsyncGenerator<Buffer> {
  const walk = async function* (rel: string): AsyncGenerator<Buffer> {
    const names = readdirSync(path.join(dir, rel)).sort();
    for (const name of names) {
      const r = rel ? `${rel}/${name}` : name;
      const full = path.join(dir, r);
      const st = lstatSync(full);
      const base = { path: r, mode: st.mode & 0o7777, mtime: Math.floor(st.mtimeMs / 1000) };
      if (st.isDirectory()) {
        if (!keep(r, true)) continue;
        yield* headers({ ...base, type: 'dir' }, 0);
        yield* walk(r);
      } else if (st.isSymbolicLink()) {
        if (keep(r, false)) yield* headers({ ...base, type: 'symlink', linkname: readlinkSync(full) }, 0);
      } else if (st.isFile() && keep(r, false)) {
        yield* headers({ ...base, type: 'file' }, st.size);
        let sent = 0;
        for await (const c of createReadStream(full)) { sent += (c as Buffer).length; yield c as Buffer; }
        if (sent !== st.size) throw new Error(`${full} changed while it was sent`);
        yield pad(st.size);
      }
    }
  };
  yield* walk('');
  yield Buffer.alloc(BLOCK * 2);
}

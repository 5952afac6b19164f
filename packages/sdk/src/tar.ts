import { createReadStream, lstatSync, readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import { tar as tarBytes, tarEnd, tarHeaders, tarPadding, type TarInput } from './core/tar.js';

export type { TarInput } from './core/tar.js';

/** The same bytes as a Buffer (no copy). */
const buffer = (u: Uint8Array): Buffer => Buffer.from(u.buffer, u.byteOffset, u.byteLength);

/** A whole tar archive of `entries`, in memory, as a Buffer (the core's writer: core/tar.ts). */
export function tar(entries: TarInput[]): Buffer {
  return buffer(tarBytes(entries));
}

/**
 * A directory as a tar stream (regular files, directories and symlinks; the
 * rest is skipped), read from disk as it is sent. `keep` decides per relative
 * path (a directory it refuses is not entered).
 */
export async function* tarDirectory(dir: string, keep: (rel: string, isDir: boolean) => boolean = () => true): AsyncGenerator<Buffer> {
  const headers = (e: Omit<TarInput, 'data'>, size: number) => tarHeaders(e, size).map(buffer);
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
        yield buffer(tarPadding(st.size));
      }
    }
  };
  yield* walk('');
  yield buffer(tarEnd());
}

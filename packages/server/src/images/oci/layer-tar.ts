import { sandboxId } from '../../util/idmap.js';
import { readTar, tarPadding } from '../../util/tar.js';

/**
 * A layer's tar in the store's overlayfs form (store/blobs/pack.ts, `tarTree`) rewritten as an
 * OCI layer's: the reverse of store/snapshotter/oci-whiteouts.ts.
 *
 * - a whiteout (a 0/0 character device) becomes an empty file `.wh.NAME` beside where it was;
 * - an opaque directory (`trusted.overlay.opaque=y`) loses the attribute and gains an empty
 *   `.wh..wh..opq` right after its own entry;
 * - `trusted.*` attributes (overlayfs' own) are dropped; the rest stay (pax `SCHILY.xattr.*`);
 * - owners are the sandbox's ids (host ids shifted back, util/idmap.ts), and a file capability
 *   stored for the sandbox's user namespace (version 3, its root's id) becomes a plain one
 *   (version 2), as it reads inside a container.
 *
 * Everything else passes through byte for byte, so the same input makes the same output.
 */
export async function* ociLayerTar(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  for await (const e of readTar(source)) {
    const { records, main } = splitRaw(e.raw);
    const h = e.header;
    const name = h.name.replace(/\/+$/, '') || '.';
    if (h.type === 'char' && octal(main, 329, 8) === 0 && octal(main, 337, 8) === 0) {
      const slash = name.lastIndexOf('/');
      yield* emptyFile(`${slash < 0 ? '' : name.slice(0, slash + 1)}${WHITEOUT}${name.slice(slash + 1)}`, h.mtime);
      for await (const _ of e.body) { /* a device has no data */ }
      continue;
    }
    let opaque = false;
    const kept: PaxRecord[] = [];
    for (const [k, v] of records) {
      if (k === OPAQUE_XATTR) { opaque = v.toString() === 'y'; continue; }
      if (k.startsWith('SCHILY.xattr.trusted.')) continue;
      if (k === 'uid' || k === 'gid') { kept.push([k, Buffer.from(String(sandboxId(Number(v.toString()))))]); continue; }
      kept.push([k, k === CAPABILITY_XATTR ? plainCapability(v) : v]);
    }
    if (kept.length > 0) yield paxHeader(kept);
    const out = Buffer.from(main);
    writeOctal(out, 108, 8, sandboxId(octal(main, 108, 8)));
    writeOctal(out, 116, 8, sandboxId(octal(main, 116, 8)));
    checksum(out);
    yield out;
    for await (const c of e.body) yield c;
    yield tarPadding(h.size);
    if (opaque && h.type === 'dir') yield* emptyFile(`${name}/${OPAQUE_MARKER}`, h.mtime);
  }
  yield Buffer.alloc(BLOCK * 2);
}

const BLOCK = 512;
const WHITEOUT = '.wh.';
const OPAQUE_MARKER = '.wh..wh..opq';
const OPAQUE_XATTR = 'SCHILY.xattr.trusted.overlay.opaque';
const CAPABILITY_XATTR = 'SCHILY.xattr.security.capability';

type PaxRecord = [string, Buffer];

const padOf = (n: number): number => (BLOCK - (n % BLOCK)) % BLOCK;

function octal(b: Buffer, off: number, len: number): number {
  const end = b.indexOf(0, off);
  const s = b.toString('ascii', off, end < 0 || end > off + len ? off + len : end).trim();
  return s === '' ? 0 : parseInt(s, 8);
}

function writeOctal(b: Buffer, off: number, len: number, v: number): void {
  b.write(v.toString(8).padStart(len - 1, '0') + '\0', off, len, 'ascii');
}

function checksum(h: Buffer): void {
  h.write('        ', 148, 8, 'ascii');
  let sum = 0;
  for (const x of h) sum += x;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'ascii');
}

/** An entry's pax records (values as bytes: attributes may be binary) and its main header block. */
function splitRaw(raw: Buffer): { records: PaxRecord[]; main: Buffer } {
  const records: PaxRecord[] = [];
  let i = 0;
  while (i + BLOCK < raw.length) {
    const size = octal(raw, i + 124, 12);
    if (raw[i + 156] === 0x78 /* x */) {
      const data = raw.subarray(i + BLOCK, i + BLOCK + size);
      let j = 0;
      while (j < data.length) {
        const space = data.indexOf(0x20, j);
        const len = Number(data.toString('ascii', j, space));
        if (space < 0 || !Number.isInteger(len) || len <= 0) break;
        const rec = data.subarray(space + 1, j + len - 1);
        const eq = rec.indexOf(0x3d);
        if (eq > 0) records.push([rec.toString('utf8', 0, eq), Buffer.from(rec.subarray(eq + 1))]);
        j += len;
      }
    }
    i += BLOCK + size + padOf(size);
  }
  return { records, main: raw.subarray(raw.length - BLOCK) };
}

/** A ustar header block (owner root, no user or group names). */
function ustar(name: string, type: string, size: number, mode: number, mtime: number): Buffer {
  const h = Buffer.alloc(BLOCK);
  const bytes = Buffer.from(name);
  bytes.copy(h, 0, 0, Math.min(bytes.length, 100));
  writeOctal(h, 100, 8, mode);
  writeOctal(h, 108, 8, 0);
  writeOctal(h, 116, 8, 0);
  writeOctal(h, 124, 12, size);
  writeOctal(h, 136, 12, Math.max(0, Math.floor(mtime)));
  h.write(type, 156, 1, 'ascii');
  h.write('ustar\0' + '00', 257, 8, 'ascii');
  checksum(h);
  return h;
}

/** A pax extended header holding `records`. */
function paxHeader(records: PaxRecord[]): Buffer {
  const parts = records.map(([k, v]) => {
    const body = Buffer.concat([Buffer.from(` ${k}=`), v, Buffer.from('\n')]);
    let len = body.length + 1;
    while (String(len).length + body.length !== len) len = String(len).length + body.length;
    return Buffer.concat([Buffer.from(String(len)), body]);
  });
  const data = Buffer.concat(parts);
  return Buffer.concat([ustar('PaxHeader', 'x', data.length, 0o644, 0), data, Buffer.alloc(padOf(data.length))]);
}

/** An empty regular file (a whiteout or an opaque marker), its name in a pax record when long. */
function* emptyFile(name: string, mtime: number): Generator<Buffer> {
  if (Buffer.byteLength(name) > 100) yield paxHeader([['path', Buffer.from(name)]]);
  yield ustar(name, '0', 0, 0o644, mtime);
}

/**
 * security.capability as a container reads it: version 3 (which names the user namespace's root,
 * here the sandboxes' root on the host) becomes version 2; others stay.
 */
function plainCapability(v: Buffer): Buffer {
  if (v.length !== 24 || v.readUInt32LE(0) >>> 24 !== 3) return v;
  const out = Buffer.from(v.subarray(0, 20));
  out.writeUInt32LE((0x02 << 24) | (v.readUInt32LE(0) & 0x1), 0);
  return out;
}

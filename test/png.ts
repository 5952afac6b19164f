import { crc32, inflateSync } from 'node:zlib';

/** A decoded image: RGB bytes, three per pixel, row after row. */
export interface Rgb { width: number; height: number; data: Buffer }

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * Decodes a PNG of 8-bit RGB or RGBA, not interlaced (what scrot and fbshot write), into RGB (alpha
 * dropped). Throws on anything else, a chunk whose CRC is wrong or a missing IEND included: the tests
 * compare screens pixel by pixel, and other readers (libpng) refuse such files.
 */
export function decodePng(png: Buffer): Rgb {
  if (!png.subarray(0, 8).equals(SIGNATURE)) throw new Error('not a PNG');
  let width = 0, height = 0, colorType = 0, ended = false;
  const idat: Buffer[] = [];
  for (let at = 8; at < png.length;) {
    const len = png.readUInt32BE(at);
    const type = png.toString('latin1', at + 4, at + 8);
    const body = png.subarray(at + 8, at + 8 + len);
    if (at + 12 + len > png.length) throw new Error(`the PNG's ${type} chunk runs past its end`);
    if (crc32(png.subarray(at + 4, at + 8 + len)) !== png.readUInt32BE(at + 8 + len)) throw new Error(`the PNG's ${type} chunk has a wrong CRC`);
    if (type === 'IHDR') {
      width = body.readUInt32BE(0); height = body.readUInt32BE(4);
      const depth = body[8]; colorType = body[9];
      if (depth !== 8 || (colorType !== 2 && colorType !== 6) || body[12] !== 0) throw new Error(`unsupported PNG: depth ${depth}, colour type ${colorType}, interlace ${body[12]}`);
    } else if (type === 'IDAT') idat.push(body);
    else if (type === 'IEND') { ended = true; break; }
    at += 12 + len;
  }
  if (!ended) throw new Error('the PNG has no IEND chunk');
  const bpp = colorType === 6 ? 4 : 3;
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * bpp;
  const out = Buffer.alloc(width * height * 3);
  let prev = Buffer.alloc(stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = Buffer.from(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)));
    for (let i = 0; i < stride && filter !== 0; i++) {
      const a = i >= bpp ? line[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      let p = 0;
      if (filter === 1) p = a;
      else if (filter === 2) p = b;
      else if (filter === 3) p = (a + b) >> 1;
      else if (filter === 4) { const pa = Math.abs(b - c), pb = Math.abs(a - c), pc = Math.abs(a + b - 2 * c); p = pa <= pb && pa <= pc ? a : pb <= pc ? b : c; }
      line[i] = (line[i] + p) & 0xff;
    }
    if (bpp === 3) line.copy(out, y * stride);
    else for (let x = 0; x < width; x++) line.copy(out, (y * width + x) * 3, x * bpp, x * bpp + 3);
    prev = line;
  }
  return { width, height, data: out };
}

/** A rectangle of the screen: left, top, width, height. */
export interface Box { x: number; y: number; w: number; h: number }

/** The pixels for which `hit` holds (given each one's offset in the data, and x and y): how many, and the smallest box around them. */
function scan(width: number, height: number, hit: (i: number, x: number, y: number) => boolean): { count: number; box: Box | null } {
  let count = 0, x0 = Infinity, y0 = Infinity, x1 = -1, y1 = -1;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (!hit((y * width + x) * 3, x, y)) continue;
      count++;
      if (x < x0) x0 = x; if (x > x1) x1 = x; if (y < y0) y0 = y; if (y > y1) y1 = y;
    }
  }
  return { count, box: count === 0 ? null : { x: x0, y: y0, w: x1 - x0 + 1, h: y1 - y0 + 1 } };
}

/** The smallest box around the pixels within `tolerance` of one colour (null: none). */
export function boxOf(img: Rgb, rgb: [number, number, number], tolerance = 8): Box | null {
  const d = img.data;
  return scan(img.width, img.height, (i) => Math.abs(d[i] - rgb[0]) <= tolerance && Math.abs(d[i + 1] - rgb[1]) <= tolerance && Math.abs(d[i + 2] - rgb[2]) <= tolerance).box;
}

/** The pixels that differ between two images of one size, outside the boxes left out. */
function differing(a: Rgb, b: Rgb, leftOut: Box[]): { count: number; box: Box | null } {
  if (a.width !== b.width || a.height !== b.height) throw new Error(`sizes differ: ${a.width}x${a.height} and ${b.width}x${b.height}`);
  const out = (x: number, y: number) => leftOut.some((r) => x >= r.x && x < r.x + r.w && y >= r.y && y < r.y + r.h);
  return scan(a.width, a.height, (i, x, y) => (a.data[i] !== b.data[i] || a.data[i + 1] !== b.data[i + 1] || a.data[i + 2] !== b.data[i + 2]) && !out(x, y));
}

/** The smallest box around the pixels that differ between two images of one size, outside the boxes left out (null: none). */
export function differingBox(a: Rgb, b: Rgb, leftOut: Box[] = []): Box | null {
  return differing(a, b, leftOut).box;
}

/** Pixels that differ between two images of one size, outside the boxes left out. */
export function differingPixels(a: Rgb, b: Rgb, leftOut: Box[] = []): number {
  return differing(a, b, leftOut).count;
}

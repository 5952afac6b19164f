import { invalid } from '../../errors.js';

/** A part of a multipart/form-data body: its field name, file name and bytes (read before the next part). */
export interface Part { name: string; filename?: string; body: AsyncGenerator<Buffer> }

const MAX_HEADERS = 16 * 1024;

/** Bytes from an async source, read up to delimiters without holding more than a chunk and a delimiter. */
class Reader {
  private buf: Buffer = Buffer.alloc(0);
  private done = false;
  constructor(private readonly source: AsyncIterator<Buffer>) {}

  private async fill(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.source.next();
    if (r.done) { this.done = true; return false; }
    this.buf = this.buf.length ? Buffer.concat([this.buf, r.value]) : r.value;
    return true;
  }

  /** The bytes before `delim` (which is consumed), as they come; the body ending first is an error. */
  async *until(delim: Buffer): AsyncGenerator<Buffer> {
    for (;;) {
      const at = this.buf.indexOf(delim);
      if (at >= 0) {
        if (at > 0) yield this.buf.subarray(0, at);
        this.buf = this.buf.subarray(at + delim.length);
        return;
      }
      const keep = delim.length - 1;
      if (this.buf.length > keep) {
        yield this.buf.subarray(0, this.buf.length - keep);
        this.buf = this.buf.subarray(this.buf.length - keep);
      }
      if (!(await this.fill())) throw invalid('the multipart body ended early');
    }
  }

  async take(n: number): Promise<Buffer> {
    while (this.buf.length < n) if (!(await this.fill())) throw invalid('the multipart body ended early');
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }
}

export function boundaryOf(contentType: string | undefined): string | null {
  const m = /^multipart\/form-data\s*;.*boundary=(?:"([^"]+)"|([^\s;]+))/i.exec(contentType ?? '');
  return m ? (m[1] ?? m[2]) : null;
}

/** Field and file names as browsers and undici's FormData escape them in Content-Disposition. */
function unescape(s: string): string {
  return s.replace(/%22/g, '"').replace(/%0A/gi, '\n').replace(/%0D/gi, '\r');
}

/**
 * The parts of a multipart/form-data body (RFC 7578), streamed: each part's body must be read to
 * its end before the next part is asked for.
 */
export async function* multipart(source: AsyncIterable<Buffer>, boundary: string): AsyncGenerator<Part> {
  const r = new Reader(source[Symbol.asyncIterator]());
  for await (const _ of r.until(Buffer.from(`--${boundary}`))) { /* the preamble */ }
  const next = Buffer.from(`\r\n--${boundary}`);
  for (;;) {
    const after = (await r.take(2)).toString();
    if (after === '--') return;
    if (after !== '\r\n') throw invalid('malformed multipart body');
    let head = '';
    for await (const c of r.until(Buffer.from('\r\n\r\n'))) {
      head += c.toString('utf8');
      if (head.length > MAX_HEADERS) throw invalid('multipart part headers too large');
    }
    const disposition = /^content-disposition:(.*)$/im.exec(head)?.[1] ?? '';
    const name = /\bname="([^"]*)"/i.exec(disposition)?.[1];
    const filename = /\bfilename="([^"]*)"/i.exec(disposition)?.[1];
    const body = r.until(next);
    yield { name: unescape(name ?? ''), ...(filename !== undefined ? { filename: unescape(filename) } : {}), body };
    for await (const _ of body) { /* what the consumer left unread */ }
  }
}

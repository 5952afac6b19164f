import { appendFileSync, existsSync, openSync, readSync, closeSync, renameSync, rmSync, statSync } from 'node:fs';

/**
 * A service's stdout and stderr across its runs: one file, rotated to `.1`
 * once it passes `maxBytes`, so a service never keeps more than twice that.
 */
export class ServiceLog {
  private size: number;

  constructor(private readonly file: string, private readonly maxBytes = 1 << 20) {
    this.size = existsSync(file) ? statSync(file).size : 0;
  }

  append(chunk: Buffer | string): void {
    if (this.size >= this.maxBytes) {
      renameSync(this.file, `${this.file}.1`);
      this.size = 0;
    }
    appendFileSync(this.file, chunk, { mode: 0o600 });
    this.size += Buffer.byteLength(chunk);
  }

  /** The last `lines` lines (from the newest 256 KiB). */
  tail(lines: number): string {
    const text = [`${this.file}.1`, this.file].map((f) => lastBytes(f, 256 * 1024)).join('');
    const all = text.split('\n');
    if (all[all.length - 1] === '') all.pop();
    return all.slice(-lines).map((l) => `${l}\n`).join('');
  }

  remove(): void {
    rmSync(this.file, { force: true });
    rmSync(`${this.file}.1`, { force: true });
    this.size = 0;
  }
}

function lastBytes(file: string, n: number): string {
  if (!existsSync(file)) return '';
  const fd = openSync(file, 'r');
  try {
    const size = statSync(file).size;
    const len = Math.min(size, n);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, size - len);
    return buf.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

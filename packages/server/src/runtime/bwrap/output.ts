import { StringDecoder } from 'node:string_decoder';

/**
 * Collects one output stream up to a cap. Past the cap, bytes are read and
 * dropped (the sandbox is never blocked on a full pipe, and memory stays flat).
 */
export class CappedOutput {
  private readonly decoder = new StringDecoder('utf8');
  private kept = 0;
  private text = '';
  truncated = false;

  /**
   * `onFull` is called once, with the first byte past the cap (also when an earlier chunk
   * ended exactly on it): the producer may stop sending.
   */
  constructor(private readonly cap: number, private readonly emit?: (data: string) => void, private readonly onFull?: () => void) {}

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    const room = this.cap - this.kept;
    if (chunk.length > room) {
      if (!this.truncated) this.onFull?.();
      this.truncated = true;
    }
    if (room <= 0) return;
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.kept += part.length;
    this.add(this.decoder.write(part));
  }

  end(): string {
    this.add(this.decoder.end());
    return this.text;
  }

  private add(s: string): void {
    if (!s) return;
    this.text += s;
    this.emit?.(s);
  }
}

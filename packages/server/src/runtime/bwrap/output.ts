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

  /** `onFull` is called once, when the cap is reached: the producer may stop sending. */
  constructor(private readonly cap: number, private readonly emit?: (data: string) => void, private readonly onFull?: () => void) {}

  push(chunk: Buffer): void {
    if (this.kept >= this.cap) { this.truncated = true; return; }
    let part = chunk;
    if (this.kept + chunk.length > this.cap) {
      part = chunk.subarray(0, this.cap - this.kept);
      this.truncated = true;
      this.onFull?.();
    }
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

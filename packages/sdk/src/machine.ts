import { MachineHandle as CoreMachineHandle } from './core/machine.js';
import { apiKeyOf } from './transport.js';
import { openPty, type MachinePty } from './pty.js';

export type { MachineExecOptions, RunCodeOptions } from './core/machine.js';

/** A machine (microVM) as Node's SDK sees it: the core's handle, with files read as Buffers and an interactive terminal. */
export class MachineHandle extends CoreMachineHandle {
  /** Files of the live machine. */
  override readonly files = {
    ...this.fileCalls(),
    read: async (p: string): Promise<Buffer> => Buffer.from(await (await this.readResponse(p)).arrayBuffer()),
  };

  /** Its screen as PNG bytes (a Buffer): see the core handle's `screen`. */
  override async screen(options: { pointer?: boolean; signal?: AbortSignal } = {}): Promise<Buffer> {
    const png = await super.screen(options);
    return Buffer.from(png.buffer, png.byteOffset, png.byteLength);
  }

  /**
   * An interactive terminal: root's login shell on a PTY of `cols` × `rows` (default 80 × 24), over a
   * WebSocket. Wakes a hibernated machine, and keeps it from hibernating while open.
   */
  pty(options: { cols?: number; rows?: number } = {}): Promise<MachinePty> {
    const q = new URLSearchParams();
    if (options.cols !== undefined) q.set('cols', String(options.cols));
    if (options.rows !== undefined) q.set('rows', String(options.rows));
    return openPty(this.sb.url, `${this.path('/pty')}${q.size ? `?${q}` : ''}`, apiKeyOf(this.sb));
  }
}

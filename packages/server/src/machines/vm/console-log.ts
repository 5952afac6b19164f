import { closeSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import { MACHINE_CONSOLE_MAX_BYTES, MACHINE_CONSOLE_MAX_LINES, type MachineConsole } from '@shellbase/protocol';
import { checkRange } from '../../core/validate.js';
import { runFiles } from '../layout.js';

/**
 * The last `lines` lines of a machine's serial console log (`run/ID/console.log`, which QEMU
 * appends to across the machine's restores and wakes on this worker), read from at most its last
 * MACHINE_CONSOLE_MAX_BYTES: a log that grew large costs a bounded read. No log yet: no lines.
 */
export function readConsoleTail(file: string, lines: number): MachineConsole {
  checkRange('tail', lines, 1, MACHINE_CONSOLE_MAX_LINES);
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { lines: [], truncated: false, size: 0 };
    throw e;
  }
  try {
    const size = fstatSync(fd).size;
    const from = Math.max(0, size - MACHINE_CONSOLE_MAX_BYTES);
    const buf = Buffer.alloc(size - from);
    let got = 0;
    while (got < buf.length) {
      const n = readSync(fd, buf, got, buf.length - got, from + got);
      if (n === 0) break;
      got += n;
    }
    let all = buf.subarray(0, got).toString('utf8').split('\n').map((l) => l.replace(/\r+$/, ''));
    // A read that starts mid-file starts mid-line: that first piece is not a line.
    const cut = from > 0;
    if (cut) all = all.slice(1);
    if (all.at(-1) === '') all.pop();
    const kept = all.slice(-lines);
    return { lines: kept, truncated: cut || kept.length < all.length, size };
  } finally {
    closeSync(fd);
  }
}

/** The last characters a guest printed on its serial console, in its run directory (for errors). */
export function consoleTail(runDir: string): string {
  try { return readFileSync(runFiles(runDir).console, 'utf8').slice(-2000); } catch { return ''; }
}

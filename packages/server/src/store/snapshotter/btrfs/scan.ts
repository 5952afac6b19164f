import { ShellbaseError } from '../../../errors.js';
import type { Change, ChangeType } from '../types.js';
import { storeServer } from './store-server.js';

export interface ScanResult {
  changes: Change[];
  bytes: number;
}

/** The scan's code for a path longer than PATH_MAX (native/store.h, SCAN_TOO_DEEP). */
const TOO_DEEP = 3;

/** Lists every entry of a layer tree with `sbx-store serve`'s scan (no per-file syscalls from JS). */
export async function scanLayer(dir: string): Promise<ScanResult> {
  const r = await storeServer.request('scan', dir);
  if (r.code === TOO_DEEP) {
    throw new ShellbaseError('invalid_argument', 'the command left a path longer than 4096 bytes; a layer cannot hold it', {
      hint: 'keep paths under 4096 bytes from /, or remove the deep tree before the command ends',
    });
  }
  if (r.code !== 0) throw new Error(`sbx-store scan ${dir} failed (${r.code}): ${r.body.toString().trim()}`);
  const out = r.body;
  const changes: Change[] = [];
  let bytes = 0;
  let start = 0;
  for (let i = out.indexOf(0, start); i !== -1; start = i + 1, i = out.indexOf(0, start)) {
    const rec = out.toString('utf8', start, i);
    const s1 = rec.indexOf(' ');
    const s2 = rec.indexOf(' ', s1 + 1);
    bytes += Number(rec.slice(s1 + 1, s2));
    changes.push(['/' + rec.slice(s2 + 1), rec[0] as ChangeType]);
  }
  changes.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return { changes, bytes };
}

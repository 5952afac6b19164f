import { SBX } from '../../util/native.js';
import { runOk } from '../../util/proc.js';
import type { Change, ChangeType } from './types.js';

export interface ScanResult {
  changes: Change[];
  bytes: number;
}

/** Lists every entry of a layer tree with `sbx scan` (one process, no per-file syscalls from JS). */
export async function scanLayer(dir: string): Promise<ScanResult> {
  const out = await runOk(SBX, ['scan', dir]);
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

import { renameSync } from 'node:fs';
import type { VmImage } from './types.js';

/**
 * Gives a VM being restored its own memory file at `to`: `from.ram` itself (renamed) when the image
 * lets it take the file, once `from.takeAfter` settled; otherwise a copy made by `copy`. Either way
 * `from.ramCopied` is called once this VM no longer needs `from.ram`, also when that failed.
 */
export async function ownRam(from: VmImage, to: string, copy: (from: string, to: string) => Promise<void>): Promise<void> {
  try {
    if (from.takeRam) {
      await from.takeAfter?.catch(() => undefined);
      renameSync(from.ram, to);
    } else {
      await copy(from.ram, to);
    }
  } finally {
    from.ramCopied?.();
  }
}

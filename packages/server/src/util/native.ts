import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The native helper (packages/server/native/sbx.c), built by `npm run build`. */
export const SBX = fileURLToPath(new URL('../../native/build/sbx', import.meta.url));

export function assertNativeBuilt(): void {
  if (!existsSync(SBX)) throw new Error(`${SBX} is missing: run npm run build`);
}

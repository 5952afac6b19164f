import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The native helper (packages/server/native/sbx.c), built by `npm run build`. */
export const SBX = fileURLToPath(new URL('../../native/build/sbx', import.meta.url));

/** The fork server of the runtime (packages/server/native/spawner.c). */
export const SBX_SPAWNER = fileURLToPath(new URL('../../native/build/sbx-spawner', import.meta.url));

export function assertNativeBuilt(): void {
  for (const f of [SBX, SBX_SPAWNER]) if (!existsSync(f)) throw new Error(`${f} is missing: run npm run build`);
}

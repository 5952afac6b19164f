import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The native helper of the runtime's sandbox commands (packages/server/native/sbx.c), built by `npm run build`. */
export const SBX = fileURLToPath(new URL('../../native/build/sbx', import.meta.url));

/** The native helper of the snapshotter's store commands (packages/server/native/store.c). */
export const SBX_STORE = fileURLToPath(new URL('../../native/build/sbx-store', import.meta.url));

/** The fork server of the runtime (packages/server/native/spawner.c). */
export const SBX_SPAWNER = fileURLToPath(new URL('../../native/build/sbx-spawner', import.meta.url));

/** Runs first inside sandboxes of contexts with services (packages/server/native/forward.c). */
export const SBX_FORWARD = fileURLToPath(new URL('../../native/build/sbx-forward', import.meta.url));
/** The egress proxy's data plane (native/egress.c). */
export const SBX_EGRESS = fileURLToPath(new URL('../../native/build/sbx-egress', import.meta.url));

/** Runs a sandbox's command as an image's user (packages/server/native/run-as.c). */
export const SBX_USER = fileURLToPath(new URL('../../native/build/sbx-user', import.meta.url));
export const SBX_TARCHECK = fileURLToPath(new URL('../../native/build/sbx-tarcheck', import.meta.url));
/** Writes an export's layer straight into the client's connection (native/send.c). */
export const SBX_SEND = fileURLToPath(new URL('../../native/build/sbx-send', import.meta.url));

export function assertNativeBuilt(): void {
  for (const f of [SBX, SBX_STORE, SBX_SPAWNER, SBX_FORWARD, SBX_EGRESS, SBX_USER, SBX_TARCHECK, SBX_SEND]) if (!existsSync(f)) throw new Error(`${f} is missing: run npm run build`);
}

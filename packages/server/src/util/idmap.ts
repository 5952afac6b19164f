/**
 * The ids sandboxes run under. Every sandbox is a user namespace that maps
 * its ids 0..65535 to BASE..BASE+65535 on the host, so its root is not the
 * host's root. Images and layers store files with host ids (image files are
 * shifted by BASE once, when the image is built); the files API shows them
 * as a sandbox sees them. The README reserves the range in /etc/subuid and
 * /etc/subgid (`root:100000:65536`) so that no other tool hands it out.
 */
const SANDBOX_IDS = { base: 100_000, count: 65_536 } as const;

/** The sandbox's root on the host. */
export const SANDBOX_ROOT = SANDBOX_IDS.base;

/** A host id as a sandbox sees it (65534, "nobody", when unmapped). */
export function sandboxId(hostId: number): number {
  const id = hostId - SANDBOX_IDS.base;
  return id >= 0 && id < SANDBOX_IDS.count ? id : 65_534;
}

/** `sbx run --userns` / `sbx userns` value. */
export const USERNS_SPEC = `${SANDBOX_IDS.base}:${SANDBOX_IDS.count}`;

/**
 * The one id machines' QEMU runs as (under TCG): root of a user namespace
 * that maps only it, just past the sandboxes' range, so that neither a
 * sandbox nor a QEMU that got out of its namespaces owns the other's files.
 * The README reserves it too (`root:165536:1`).
 */
export const MACHINE_ROOT = SANDBOX_IDS.base + SANDBOX_IDS.count;
export const MACHINE_USERNS_SPEC = `${MACHINE_ROOT}:1`;

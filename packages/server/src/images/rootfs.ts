import { existsSync } from 'node:fs';
import type { HostPrograms } from '../runtime/types.js';
import type { Snapshotter } from '../store/snapshotter/types.js';

/**
 * Writes the whole tree of a layer stack (bottom first) into `out`, a directory that does not
 * exist yet: a Dockerfile image's build, made an image's root file system in the cache. `cp -a`
 * reads the stack as overlayfs merges it (whiteouts and opaque directories applied), as the host's
 * root, so owners stay as the store keeps them (shifted for the sandboxes' user namespace, as every
 * image's are), with device nodes, hard links, modes, times and extended attributes.
 */
export async function writeRootfs(layers: Snapshotter, programs: HostPrograms, stack: readonly string[], out: string): Promise<void> {
  if (existsSync(out)) throw new Error(`${out} exists already`);
  // overlayfs needs a scratch for its upper directory, though the copy only reads.
  const scratch = await layers.prepare({ diskMb: 64 });
  try {
    await programs.runHelper({ mount: await layers.mounts(stack, scratch), hostRoot: true, argv: (merged) => ['cp', '-a', '--', merged, out] });
  } finally {
    await layers.discard(scratch);
  }
}

import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { parseDockerignore } from '@shellbase/protocol';
import type { BuildOptions as CoreBuildOptions, TarBody } from './core/images.js';
import { tarDirectory } from './tar.js';

export interface BuildOptions extends Omit<CoreBuildOptions, 'context'> {
  /** The build context: a directory (sent as a tar, its .dockerignore applied), or a tar archive of one. */
  context: string | TarBody;
}

/** A directory as a build context: everything but what its .dockerignore leaves out (the Dockerfile always goes). */
export function contextOf(dir: string, dockerfile = 'Dockerfile'): AsyncIterable<Uint8Array> {
  if (!statSync(dir).isDirectory()) throw new Error(`${dir} is not a directory`);
  const file = path.join(dir, '.dockerignore');
  const ignore = parseDockerignore(existsSync(file) ? readFileSync(file, 'utf8') : '');
  const always = new Set([dockerfile, '.dockerignore']);
  return tarDirectory(dir, (rel, isDir) => always.has(rel) || (isDir ? !ignore.prunes(rel) : !ignore.ignores(rel)));
}

/** The options with a directory context read as a tar stream. */
export function withTarContext<O extends BuildOptions>(o: O): O & CoreBuildOptions {
  return { ...o, context: typeof o.context === 'string' ? contextOf(o.context, o.dockerfile) : o.context };
}

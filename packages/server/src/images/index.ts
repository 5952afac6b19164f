import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ShellbaseError } from '../errors.js';
import { SBX_STORE } from '../util/native.js';
import { imageLayerId, parseImageLayer } from '../store/layer-ids.js';
import { run, runOk } from '../util/proc.js';
import { configuredMirror, debianRecipe } from './debian.js';

/**
 * Images are root file systems built once per host into the cache directory:
 * `$SHELLBASE_CACHE/images/NAME/VERSION-HASH/rootfs`. An image is the bottom
 * layer of every version made from it; its id names the recipe it came from.
 */
export interface ImageInfo {
  /** Layer id of the image, e.g. `image:debian:1-ab12cd34` (store/layer-ids.ts). */
  layerId: string;
  name: string;
  /** Its build: the recipe's version and hash. */
  tag: string;
  rootfs: string;
}

const recipes = { debian: debianRecipe } as const;
export type ImageName = keyof typeof recipes;
export const IMAGE_NAMES = Object.keys(recipes) as ImageName[];

function recipeTag(name: ImageName): string {
  const recipe = recipes[name];
  const hash = createHash('sha256').update(JSON.stringify(recipe)).digest('hex').slice(0, 8);
  return `${recipe.version}-${hash}`;
}

export function imageInfo(cache: string, name: string): ImageInfo {
  if (!(IMAGE_NAMES as string[]).includes(name)) {
    throw new ShellbaseError('invalid_argument', `unknown image ${JSON.stringify(name)}`, {
      hint: `use one of: ${IMAGE_NAMES.join(', ')}`,
    });
  }
  const tag = recipeTag(name as ImageName);
  return { layerId: imageLayerId(name, tag), name, tag, rootfs: path.join(cache, 'images', name, tag, 'rootfs') };
}

export function imageBuilt(cache: string, name: string): boolean {
  return existsSync(path.join(path.dirname(imageInfo(cache, name).rootfs), 'recipe.json'));
}

/** Resolves an image layer id back to its root file system. */
export function imageRootfs(cache: string, layerId: string): string {
  const image = parseImageLayer(layerId);
  if (!image) throw new Error(`${layerId} is not an image's layer`);
  return path.join(cache, 'images', image.name, image.tag, 'rootfs');
}

/** Whether a process with this id runs (on this host). */
function alive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch (e) { return (e as NodeJS.ErrnoException).code === 'EPERM'; }
}

/**
 * Builds an image if this recipe has not been built yet. Builds into a
 * temporary directory of its own (`VERSION-HASH.building-PID`) and renames it
 * into place, so a crash never leaves a half-built image that looks complete,
 * and two processes building the same recipe at once (a set-up and a server's
 * start) never write into one tree: the first to finish wins, the other's
 * build is dropped. A build whose process is gone is removed.
 */
export async function buildImage(cache: string, name: string, progress: (line: string) => void): Promise<ImageInfo> {
  const info = imageInfo(cache, name);
  if (imageBuilt(cache, name)) return info;
  const recipe = recipes[name as ImageName];
  const final = path.dirname(info.rootfs);
  const tmp = `${final}.building-${process.pid}`;
  const parent = path.dirname(final);
  mkdirSync(parent, { recursive: true });
  for (const entry of readdirSync(parent)) {
    const m = /^(.*)\.building(?:-(\d+))?$/.exec(entry);
    if (m && m[1] === path.basename(final) && (m[2] === undefined || m[2] === String(process.pid) || !alive(Number(m[2])))) {
      rmSync(path.join(parent, entry), { recursive: true, force: true });
    }
  }
  mkdirSync(tmp, { recursive: true });
  const mirror = configuredMirror();
  progress(`building image ${name} (${recipe.suite} ${recipe.variant} from ${mirror}); this takes a minute or more`);
  let partial = '';
  const r = await run('debootstrap', [
    `--variant=${recipe.variant}`, `--include=${recipe.include.join(',')}`,
    recipe.suite, path.join(tmp, 'rootfs'), mirror,
  ], {
    onOutput: (chunk) => {
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const l of lines) if (l.trim()) progress(`  ${l.trim()}`);
    },
  });
  if (r.code !== 0) throw new Error(`debootstrap failed (${r.code}): ${r.stderr.slice(-2000)}`);
  const rootfs = path.join(tmp, 'rootfs');
  // Leave no apt caches in the image, and a root home to start queries in.
  rmSync(path.join(rootfs, 'var/cache/apt/archives'), { recursive: true, force: true });
  mkdirSync(path.join(rootfs, 'var/cache/apt/archives/partial'), { recursive: true });
  mkdirSync(path.join(rootfs, 'root'), { recursive: true });
  progress('configuring the image (locale, the default user)');
  const post = await run('chroot', [rootfs, '/usr/bin/env', '-i', 'PATH=/usr/sbin:/usr/bin:/sbin:/bin', 'LC_ALL=C', '/bin/sh', '-c', recipe.postInstall]);
  if (post.code !== 0) throw new Error(`configuring the image failed (${post.code}): ${post.stderr.slice(-2000)}`);
  progress(`shifting file ownership by ${recipe.idShift} (the sandboxes' user namespace)`);
  await runOk(SBX_STORE, ['shift', rootfs, String(recipe.idShift)]);
  writeFileSync(path.join(tmp, 'recipe.json'), JSON.stringify({ format: 1, ...recipe, builtAt: new Date().toISOString() }, null, 2));
  if (!imageBuilt(cache, name)) rmSync(final, { recursive: true, force: true });
  try {
    renameSync(tmp, final);
  } catch (err) {
    if (!imageBuilt(cache, name)) throw err;
    rmSync(tmp, { recursive: true, force: true }); // another process finished the same recipe first
  }
  progress(`image ${name} ready at ${info.rootfs}`);
  return info;
}

export function readRecipe(cache: string, name: string): unknown {
  return JSON.parse(readFileSync(path.join(path.dirname(imageInfo(cache, name).rootfs), 'recipe.json'), 'utf8'));
}

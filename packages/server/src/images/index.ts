import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ShellbaseError } from '../errors.js';
import { SBX_STORE } from '../util/native.js';
import { imageLayerId, parseImageLayer } from '../store/layer-ids.js';
import { run, runOk } from '../util/proc.js';
import { contextDigest } from './build-context.js';
import { CODE_INTERPRETER_CONTEXT, codeInterpreterRecipe } from './code-interpreter.js';
import { configuredMirror, debianRecipe } from './debian.js';
import { DESKTOP_CONTEXT, DESKTOP_MACHINE, desktopRecipe } from './desktop.js';

export { contextDigest, contextEntries, type ContextEntry } from './build-context.js';
export { writeRootfs } from './rootfs.js';

/**
 * Images are root file systems built once per host into the cache directory:
 * `$SHELLBASE_CACHE/images/NAME/VERSION-HASH/rootfs`. An image is the bottom
 * layer of every version made from it; its id names the recipe it came from.
 * A recipe is debootstrap's (debian) or a Dockerfile built FROM another
 * built-in image by shellbase's own builder (code-interpreter, desktop), whose build
 * the caller supplies (`DockerfileBuilder`: it needs an engine, a layer above this one).
 */
export interface ImageInfo {
  /** Layer id of the image, e.g. `image:debian:1-ab12cd34` (store/layer-ids.ts). */
  layerId: string;
  name: string;
  /** Its build: the recipe's version and hash. */
  tag: string;
  rootfs: string;
}

const recipes = { debian: debianRecipe, 'code-interpreter': codeInterpreterRecipe, desktop: desktopRecipe } as const;
export type ImageName = keyof typeof recipes;
export const IMAGE_NAMES = Object.keys(recipes) as ImageName[];
type Recipe = (typeof recipes)[ImageName];
type DockerfileRecipe = typeof codeInterpreterRecipe | typeof desktopRecipe;
const isDockerfile = (r: Recipe): r is DockerfileRecipe => 'kind' in r && r.kind === 'dockerfile';

/** Where each Dockerfile recipe's build context is. */
const contexts: Record<string, string> = { 'code-interpreter': CODE_INTERPRETER_CONTEXT, desktop: DESKTOP_CONTEXT };

/** One Dockerfile image's build, as its builder gets it. */
export interface DockerfileBuild {
  name: string;
  tag: string;
  /** The build context: a directory with the Dockerfile at its root. */
  context: string;
  /** A directory of the build's own (a temporary home, say), removed once the build ends. */
  work: string;
  /** Where the built tree goes: a directory that does not exist yet, its ids shifted as every image's are. */
  rootfs: string;
  progress(line: string): void;
}

/** Builds a Dockerfile image (the CLI's: an engine over a temporary home). */
export type DockerfileBuilder = (build: DockerfileBuild) => Promise<void>;

/**
 * A Dockerfile image's tag: its recipe's version and a hash of the recipe, its base image's tag and
 * its build context's digest. Pure, for the tests; `recipeTag` reads the context.
 */
export function dockerfileTag(recipe: { version: number }, baseTag: string, context: string): string {
  const hash = createHash('sha256').update(JSON.stringify({ recipe, base: baseTag, context })).digest('hex').slice(0, 8);
  return `${recipe.version}-${hash}`;
}

/** Digests of Dockerfile recipes' contexts, read once per process: a server names the image its files named when it started. */
const digests = new Map<string, string>();

function digestOf(name: string): string {
  let d = digests.get(name);
  if (d === undefined) {
    d = contextDigest(contexts[name]);
    digests.set(name, d);
  }
  return d;
}

function recipeTag(name: ImageName): string {
  const recipe = recipes[name];
  if (isDockerfile(recipe)) return dockerfileTag(recipe, recipeTag(recipe.base), digestOf(name));
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

/** Mount points at or below `dir`, deepest first (a Dockerfile build's temporary home mounts its store there). */
function mountsUnder(dir: string): string[] {
  const points = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4] ?? '')
    .map((p) => p.replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p) => p === dir || p.startsWith(`${dir}/`));
  return points.sort((a, b) => b.length - a.length);
}

/** Removes a build's directory; what a build that died left mounted below it is detached first. */
async function removeBuild(dir: string): Promise<void> {
  for (const m of mountsUnder(dir)) await runOk('umount', ['--lazy', m]);
  rmSync(dir, { recursive: true, force: true });
}

/**
 * A Dockerfile build's work directory, `$SHELLBASE_CACHE/images/.work-PID`: short, as a server's
 * home must be for its sockets' paths. Those of processes that are gone are removed first.
 */
async function workDir(cache: string): Promise<string> {
  const dir = path.join(cache, 'images');
  for (const entry of readdirSync(dir)) {
    const m = /^\.work-(\d+)$/.exec(entry);
    if (m && (m[1] === String(process.pid) || !alive(Number(m[1])))) await removeBuild(path.join(dir, entry));
  }
  return path.join(dir, `.work-${process.pid}`);
}

/**
 * Builds an image if this recipe has not been built yet. Builds into a
 * temporary directory of its own (`VERSION-HASH.building-PID`) and renames it
 * into place, so a crash never leaves a half-built image that looks complete,
 * and two processes building the same recipe at once (a set-up and a server's
 * start) never write into one tree: the first to finish wins, the other's
 * build is dropped. A build whose process is gone is removed. A Dockerfile
 * recipe builds its base image first and needs `builders.dockerfile`.
 */
export async function buildImage(cache: string, name: string, progress: (line: string) => void,
  builders: { dockerfile?: DockerfileBuilder } = {}): Promise<ImageInfo> {
  const info = imageInfo(cache, name);
  if (imageBuilt(cache, name)) return info;
  const recipe = recipes[name as ImageName];
  if (isDockerfile(recipe) && !builders.dockerfile) {
    throw new ShellbaseError('failed_precondition', `image ${name} is built by shellbase's Dockerfile builder, which is not at hand here`, {
      hint: `run \`shellbase image build ${name}\` (scripts/setup does)`,
    });
  }
  const base = isDockerfile(recipe) ? await buildImage(cache, recipe.base, progress, builders) : null;
  const final = path.dirname(info.rootfs);
  const tmp = `${final}.building-${process.pid}`;
  const parent = path.dirname(final);
  mkdirSync(parent, { recursive: true });
  for (const entry of readdirSync(parent)) {
    const m = /^(.*)\.building(?:-(\d+))?$/.exec(entry);
    if (m && m[1] === path.basename(final) && (m[2] === undefined || m[2] === String(process.pid) || !alive(Number(m[2])))) {
      await removeBuild(path.join(parent, entry));
    }
  }
  mkdirSync(tmp, { recursive: true });
  let record: Record<string, unknown>;
  try {
    if (isDockerfile(recipe)) {
      const context = contexts[name];
      const work = await workDir(cache);
      progress(`building image ${name} (${path.join(context, 'Dockerfile')}, FROM ${recipe.base} ${base!.tag}) with shellbase's Dockerfile builder; this takes minutes`);
      try {
        await builders.dockerfile!({ name, tag: info.tag, context, work, rootfs: path.join(tmp, 'rootfs'), progress });
      } finally {
        await removeBuild(work);
      }
      if (contextDigest(context) !== digestOf(name)) {
        throw new ShellbaseError('conflict', `the files of ${context} changed while image ${name} was built`, { hint: 'build it again' });
      }
      record = { format: 1, ...recipe, tag: info.tag, baseTag: base!.tag, context: digestOf(name) };
    } else {
      await debootstrap(recipe, tmp, progress);
      record = { format: 1, ...recipe };
    }
  } catch (e) {
    await removeBuild(tmp);
    throw e;
  }
  writeFileSync(path.join(tmp, 'recipe.json'), JSON.stringify({ ...record, builtAt: new Date().toISOString() }, null, 2));
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

/** The debian image: debootstrap, the recipe's configuration in a chroot, ids shifted. */
async function debootstrap(recipe: typeof debianRecipe, tmp: string, progress: (line: string) => void): Promise<void> {
  const mirror = configuredMirror();
  progress(`building image ${recipe.name} (${recipe.suite} ${recipe.variant} from ${mirror}); this takes a minute or more`);
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
}

export function readRecipe(cache: string, name: string): unknown {
  return JSON.parse(readFileSync(path.join(path.dirname(imageInfo(cache, name).rootfs), 'recipe.json'), 'utf8'));
}

/** The memory and virtual CPUs a machine of this built-in image gets when its create names none (undefined: the server's defaults). */
export function imageMachineDefaults(name: string): { memoryMb?: number; cpus?: number } {
  return Object.hasOwn(machineDefaults, name) ? machineDefaults[name] : {};
}

/** Built-in images whose machines want more than the server's defaults. */
const machineDefaults: Record<string, { memoryMb?: number; cpus?: number }> = { desktop: DESKTOP_MACHINE };

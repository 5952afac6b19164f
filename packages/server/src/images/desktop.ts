import { fileURLToPath } from 'node:url';

/**
 * The recipe of the `desktop` image (E2B's `desktop` template, the default of `@e2b/desktop`): the
 * Dockerfile and what it copies in `packages/server/templates/desktop`, built FROM the debian image
 * by shellbase's own Dockerfile builder (`shellbase image build desktop`). Its tag hashes the
 * recipe, the debian image's tag and the build context, as the code-interpreter image's does.
 */
export const desktopRecipe = {
  name: 'desktop',
  version: 1,
  kind: 'dockerfile',
  base: 'debian',
} as const;

/**
 * A desktop machine's size when its create names none (not part of the recipe: it changes no
 * image). The session and a browser need more memory than the server's default, and a second
 * virtual CPU: with one, Chromium loading a page while other commands run in the guest stalls
 * and gives up on its network service (under TCG).
 */
export const DESKTOP_MACHINE = { memoryMb: 2048, cpus: 2 } as const;

/** The build context: the template's directory in this checkout (the same from src/ and dist/). */
export const DESKTOP_CONTEXT = fileURLToPath(new URL('../../templates/desktop', import.meta.url));

import { fileURLToPath } from 'node:url';

/**
 * The recipe of the `code-interpreter` image (E2B's `code-interpreter-v1` template): the Dockerfile
 * and what it copies in `packages/server/templates/code-interpreter`, built FROM the debian image
 * by shellbase's own Dockerfile builder (`shellbase image build code-interpreter`). Its tag hashes
 * the recipe, the debian image's tag and the build context (images/build-context.ts), so a change
 * of any of them is a new image; bump `version` when how the image is made changes otherwise.
 */
export const codeInterpreterRecipe = {
  name: 'code-interpreter',
  version: 1,
  kind: 'dockerfile',
  /** The built-in image its Dockerfile starts FROM. */
  base: 'debian',
} as const;

/** The build context: the template's directory in this checkout (the same from src/ and dist/). */
export const CODE_INTERPRETER_CONTEXT = fileURLToPath(new URL('../../templates/code-interpreter', import.meta.url));

import { ShellbaseError } from '@shellbase/sdk';

/** What a model gets back at most per tool call; the rest is saved or paged. */
export const TEXT_LIMIT = 16 * 1024;

type Result = { content: { type: 'text'; text: string }[]; isError?: boolean };
const text = (t: string): Result => ({ content: [{ type: 'text', text: t }] });

/** Errors become tool errors a model can act on (code, message, hint), never protocol failures. */
export async function guarded(fn: () => Promise<string>): Promise<Result> {
  try {
    return text(await fn());
  } catch (e) {
    if (e instanceof ShellbaseError) {
      const details = e.details ? `\ndetails: ${JSON.stringify(e.details).slice(0, 2000)}` : '';
      // The SDK's message already ends with the hint.
      return { isError: true, content: [{ type: 'text', text: `${e.code}: ${e.message}${details}` }] };
    }
    return { isError: true, content: [{ type: 'text', text: `error: ${(e as Error).message}` }] };
  }
}

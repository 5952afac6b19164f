import { ShellbaseError } from '@shellbase/sdk';

/** What a model gets back at most per tool call; the rest is saved or paged. */
export const TEXT_LIMIT = 16 * 1024;

/**
 * A command's output for a model: whole when it fits in TEXT_LIMIT, else its start, with all of
 * it saved by `save` in a file whose path (and `how` to read it) the result names.
 */
export async function fitted(body: string, save: (file: string, text: string) => Promise<void>, how: string): Promise<string> {
  if (body.length <= TEXT_LIMIT) return body;
  const file = `/root/.mcp-output/${Date.now()}.txt`;
  await save(file, body);
  return `${body.slice(0, TEXT_LIMIT)}\n[output cut at ${TEXT_LIMIT} of ${body.length} characters; all of it is in ${file}: ${how}]`;
}

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

import { ShellbaseError, limitMessage, type LimitHit } from '@shellbase/sdk';
import { z } from 'zod';

/** What a model gets back at most per tool call; the rest is saved or paged. */
export const TEXT_LIMIT = 16 * 1024;

/** The fields of a command's result every exec-like tool returns. */
export const commandOutput = {
  exitCode: z.number().int(),
  stdout: z.string().describe(`At most ${TEXT_LIMIT} characters; outputFile has all of it when it was longer`),
  stderr: z.string(),
  timedOut: z.boolean(),
  limit: z.object({ name: z.literal('timeoutMs'), value: z.number().int(), max: z.number().int() }).optional()
    .describe('With timedOut: the time limit it met (value, ms) and the most this tenant may pass as timeoutMs (max)'),
  timeoutMessage: z.string().optional().describe('With timedOut: which limit ended it and how to give it longer'),
  outputFile: z.string().optional().describe('Where the whole output was saved when it was cut'),
};

/** A timed-out command's limit and what to do about it, as structured fields (nothing otherwise). */
export function limitFields(r: { timedOut: boolean; limit?: LimitHit }): { limit?: LimitHit; timeoutMessage?: string } {
  if (!r.timedOut) return {};
  return { ...(r.limit ? { limit: r.limit } : {}), timeoutMessage: limitMessage(r.limit) };
}

/** A tool's answer: prose for the model, and the same facts as fields (the tool's outputSchema). */
export interface ToolAnswer<S extends Record<string, unknown> = Record<string, unknown>> {
  text: string;
  structured: S;
  /** Pictures for the model's host to show (base64 and their MIME type), after the text. */
  images?: { data: string; mimeType: string }[];
}

/**
 * A command's output for a model: whole when it fits in TEXT_LIMIT, else its start, with all of
 * it saved by `save` in a file whose path (and `how` to read it) the text names.
 */
export async function fitted(body: string, save: (file: string, text: string) => Promise<void>, how: string): Promise<{ text: string; file?: string }> {
  if (body.length <= TEXT_LIMIT) return { text: body };
  const file = `/root/.mcp-output/${Date.now()}.txt`;
  await save(file, body);
  return { text: `${body.slice(0, TEXT_LIMIT)}\n[output cut at ${TEXT_LIMIT} of ${body.length} characters; all of it is in ${file}: ${how}]`, file };
}

/** At most TEXT_LIMIT characters of a stream's output for a structured result. */
export const cut = (s: string) => (s.length > TEXT_LIMIT ? s.slice(0, TEXT_LIMIT) : s);

type Result = { content: ({ type: 'text'; text: string } | { type: 'image'; data: string; mimeType: string })[]; structuredContent?: Record<string, unknown>; isError?: boolean };

/** Errors become tool errors a model can act on (code, message, hint), never protocol failures. */
export async function guarded(fn: () => Promise<ToolAnswer>): Promise<Result> {
  try {
    const a = await fn();
    return { content: [{ type: 'text', text: a.text }, ...(a.images ?? []).map((i) => ({ type: 'image' as const, ...i }))], structuredContent: a.structured };
  } catch (e) {
    if (e instanceof ShellbaseError) {
      const details = e.details ? `\ndetails: ${JSON.stringify(e.details).slice(0, 2000)}` : '';
      // The SDK's message already ends with the hint.
      return { isError: true, content: [{ type: 'text', text: `${e.code}: ${e.message}${details}` }] };
    }
    return { isError: true, content: [{ type: 'text', text: `error: ${(e as Error).message}` }] };
  }
}

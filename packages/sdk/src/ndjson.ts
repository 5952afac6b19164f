import type { ErrorBody } from '@shellbase/protocol';
import { errorFromBody } from './errors.js';

/** The events of an NDJSON response, one per line; an `error` event is thrown as the typed error. */
export async function* ndjson<E extends { type: string }>(res: Response): AsyncGenerator<E> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (!line) continue;
      const event = JSON.parse(line) as E & { error?: ErrorBody };
      if (event.type === 'error' && event.error) throw errorFromBody(event.error, 500);
      yield event;
    }
  }
}

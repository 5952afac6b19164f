import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { isErrorCode, type ErrorBody } from '@shellbase/protocol';
import { ConnectionError, errorFromBody } from './core/errors.js';

/**
 * A `GET` of the API asking for an Upgrade (a TCP tunnel, a WebSocket), with the API key: resolves
 * to the upgraded socket and the bytes that came with the answer's head, or rejects with the
 * API's typed error when the server answered instead (its JSON error body), or a ConnectionError
 * when it could not be reached.
 */
export function upgradeRequest(baseUrl: string, path: string, apiKey: string | undefined,
  headers: Record<string, string>): Promise<{ socket: Socket; head: Buffer }> {
  const url = new URL(path, `${baseUrl}/`);
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: 'GET',
      headers: { connection: 'Upgrade', ...headers, ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
    });
    req.once('upgrade', (_res, socket: Socket, head: Buffer) => resolve({ socket, head }));
    req.once('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.once('end', () => {
        const text = Buffer.concat(chunks).toString();
        let body: ErrorBody = { code: 'internal', message: `HTTP ${res.statusCode}: ${text.slice(0, 500)}` };
        try {
          const parsed = JSON.parse(text) as { error?: ErrorBody };
          if (parsed.error && isErrorCode(parsed.error.code)) body = parsed.error;
        } catch { /* not JSON */ }
        reject(errorFromBody(body, res.statusCode ?? 500));
      });
    });
    req.once('error', (e) => reject(new ConnectionError({
      code: 'unavailable', message: `cannot reach the shellbase server at ${baseUrl}: ${(e as NodeJS.ErrnoException).code ?? e.message}`,
      hint: 'check SHELLBASE_URL', details: { url: baseUrl },
    }, 0, { cause: e })));
    req.end();
  });
}

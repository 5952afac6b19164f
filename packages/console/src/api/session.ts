import { ForbiddenError, Shellbase, UnauthorizedError, type RequestOptions } from '@shellbase/sdk/core';

/**
 * The console's one client of the API: the SDK's browser-safe core (`@shellbase/sdk/core`) with
 * this tab's key, talking to the server that serves the console. Every view calls the API through
 * `sb` (contexts, files, machines, tenants, usage) and reads the SDK's typed errors.
 */

const KEY = 'shellbase.apiKey';

/** The API key of this tab: sessionStorage, so it goes when the tab closes. */
export const session = {
  get key(): string | null { return sessionStorage.getItem(KEY); },
  set(key: string): void { sessionStorage.setItem(KEY, key); },
  clear(): void { sessionStorage.removeItem(KEY); },
};

/** What the console calls when the tab's key is refused mid-session (it signs out). */
let onUnauthorized: () => void = () => {};
export function setUnauthorizedHandler(f: () => void): void { onUnauthorized = f; }

/** The SDK's client, asking the session for its key at each request; a 401 signs the tab out. */
class TabClient extends Shellbase {
  override async request(method: string, path: string, options?: RequestOptions): Promise<Response> {
    try {
      return await super.request(method, path, options);
    } catch (err) {
      if (err instanceof UnauthorizedError) onUnauthorized();
      throw err;
    }
  }
}

export const sb: Shellbase = new TabClient({ url: location.origin, apiKey: () => session.key ?? undefined });

/**
 * Checks a key before the tab keeps it, with a client of its own (a refusal does not sign anyone
 * out): true for the admin's key (it may list tenants), false for a tenant's (403); a refused
 * key throws the SDK's UnauthorizedError.
 */
export async function isAdminKey(key: string): Promise<boolean> {
  try {
    await new Shellbase({ url: location.origin, apiKey: key }).tenants.list();
    return true;
  } catch (err) {
    if (err instanceof ForbiddenError) return false;
    throw err;
  }
}

/** base64url of a string's UTF-8 bytes (a key as a WebSocket subprotocol token). */
function base64url(s: string): string {
  let bin = '';
  for (const b of new TextEncoder().encode(s)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * A WebSocket to a machine's PTY (`GET /v1/machines/{id}/pty`). A browser cannot set
 * `Authorization` on a WebSocket, so the tab's key is offered as the subprotocol
 * `shellbase-key.BASE64URL(KEY)` beside `shellbase-pty` (the server answers with `shellbase-pty`
 * only); never in the URL (docs/security.md).
 */
export function machinePty(id: string, cols: number, rows: number): WebSocket {
  const u = new URL(`/v1/machines/${encodeURIComponent(id)}/pty?${new URLSearchParams({ cols: String(cols), rows: String(rows) })}`, sb.url);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  const key = session.key;
  const ws = new WebSocket(u.href, ['shellbase-pty', ...(key ? [`shellbase-key.${base64url(key)}`] : [])]);
  ws.binaryType = 'arraybuffer';
  return ws;
}

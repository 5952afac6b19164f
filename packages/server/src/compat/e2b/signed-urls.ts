import { createHash } from 'node:crypto';
import { ConnectError } from './connect.js';

// E2B's signed file URLs (`uploadUrl`, `downloadUrl` of a secure sandbox), made with the sandbox's
// envd access token: checked where such a URL lands and again where it is served.

/**
 * A signed URL (uploadUrl/downloadUrl of a secure sandbox): `v1_` and the unpadded base64 of
 * sha256("path:operation:user:token[:expiration]"), `user` empty for the default one.
 */
export function signedBy(url: URL, method: string | undefined, token: string): boolean {
  const sig = url.searchParams.get('signature');
  const exp = url.searchParams.get('signature_expiration');
  const operation = method === 'POST' ? 'write' : 'read';
  const raw = `${url.searchParams.get('path') ?? ''}:${operation}:${url.searchParams.get('username') ?? ''}:${token}${exp !== null ? `:${exp}` : ''}`;
  return sig === `v1_${createHash('sha256').update(raw).digest('base64').replace(/=+$/, '')}`;
}

/** Refuses a signed URL that expired or whose signature is not the sandbox's (`token`); nothing when it carries none. */
export function checkSignature(token: string, url: URL, method: string | undefined): void {
  if (!url.searchParams.has('signature')) return;
  const exp = url.searchParams.get('signature_expiration');
  if (exp !== null && !(Number(exp) * 1000 > Date.now())) throw new ConnectError('unauthenticated', 'the signed URL expired');
  if (!signedBy(url, method, token)) throw new ConnectError('unauthenticated', 'the URL\'s signature does not match');
}

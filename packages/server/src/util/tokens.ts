import { randomBytes } from 'node:crypto';

/** A gateway token is a DNS label: 26 characters of base32 (130 bits). Services and machines' ports use them. */
export function newToken(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567';
  return [...randomBytes(26)].map((b) => alphabet[b & 31]).join('');
}

/** Where the gateway on `port` answers for `token`: by host label, or by path prefix for clients that cannot resolve *.localhost. */
export function gatewayUrls(port: number, token: string): { url: string; pathUrl: string } {
  return { url: `http://${token}.localhost:${port}/`, pathUrl: `http://127.0.0.1:${port}/s/${token}/` };
}

import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

/**
 * `Shellbase-Signature` of a delivery: `t=<unix seconds>,v1=<hex HMAC-SHA256 over "<t>.<body>"
 * keyed by the webhook's secret>`. A receiver recomputes it and refuses a `t` too far from its
 * clock (a replay).
 */
export function shellbaseSignature(secret: string, body: string, at: Date): string {
  const t = Math.floor(at.getTime() / 1000);
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
}

/** Whether `header` is a valid signature of `body` by `secret`, made within `toleranceS` of `now`. */
export function verifyShellbaseSignature(secret: string, body: string, header: string, now = new Date(), toleranceS = 300): boolean {
  const parts = Object.fromEntries(header.split(',').map((p) => p.split('=', 2) as [string, string]));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(now.getTime() / 1000 - t) > toleranceS || typeof parts.v1 !== 'string') return false;
  const want = Buffer.from(createHmac('sha256', secret).update(`${t}.${body}`).digest('hex'));
  const got = Buffer.from(parts.v1);
  return got.length === want.length && timingSafeEqual(got, want);
}

/** E2B's `e2b-signature`: SHA-256 of the secret followed by the body, base64 without padding. */
export function e2bSignature(secret: string, body: string): string {
  return createHash('sha256').update(secret + body).digest('base64').replace(/=+$/, '');
}

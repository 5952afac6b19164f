import { createHash, randomBytes } from 'node:crypto';

/** API keys are stored only as SHA-256 hashes. */
export const hashKey = (key: string) => createHash('sha256').update(key).digest('hex');

export function newApiKey(): string {
  return `sb_${randomBytes(24).toString('base64url')}`;
}

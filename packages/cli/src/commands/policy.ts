import type { NetworkPolicy } from '@shellbase/sdk';
import { flag, UsageError, type ParsedArgs } from '../args.js';

const POLICY_WORDS = 'none, public or allow:DOMAIN[,DOMAIN…] (e.g. allow:pypi.org,*.pythonhosted.org)';

/** `none`, `public` or `allow:a.com,*.b.com` as a policy (the server checks the domains). */
export function parsePolicy(text: string, usage: string): NetworkPolicy {
  if (text === 'none' || text === 'public') return { egress: text };
  if (text.startsWith('allow:') && text.length > 6) return { egress: 'allow', domains: text.slice(6).split(',').map((d) => d.trim()).filter(Boolean) };
  throw new UsageError(`a network policy is ${POLICY_WORDS}, not ${JSON.stringify(text)}\n\nusage: ${usage}`);
}

/** `--network POLICY` of a command, if given. */
export function networkFlag(args: ParsedArgs, usage: string): NetworkPolicy | undefined {
  const v = flag(args, 'network');
  return v === undefined ? undefined : parsePolicy(v, usage);
}

export const showPolicy = (p: NetworkPolicy) => (p.egress === 'allow' ? `allow ${p.domains.join(', ')}` : p.egress);

import { isIP } from 'node:net';
import type { NetworkPolicy } from '@shellbase/protocol';
import { invalid } from '../../errors.js';
import { checkPolicy } from '../../net/policy.js';

/** E2B's "all traffic" selector: `denyOut: ['0.0.0.0/0']` blocks everything not in `allowOut`. */
const ALL_TRAFFIC = '0.0.0.0/0';

/**
 * E2B's egress options as a shellbase policy, which narrows the template's context (or the
 * tenant): `allow_internet_access: false` or `denyOut: ['0.0.0.0/0']` is `none`, and with
 * `allowOut` domains an allow list; anything else leaves the policy as it is (undefined).
 * shellbase's policies name domains, and private addresses are refused whatever the policy, so
 * rules by address (a CIDR or an IP in `allowOut`, any `denyOut` but all traffic) are a 400.
 */
export function e2bPolicy(allowInternet: unknown, network: Record<string, unknown>): NetworkPolicy | undefined {
  if (allowInternet !== undefined && allowInternet !== null && typeof allowInternet !== 'boolean') throw invalid('allow_internet_access must be a boolean');
  const list = (key: 'allowOut' | 'denyOut'): string[] => {
    const v = network[key];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw invalid(`network.${key} must be a list of strings`);
    return v as string[];
  };
  const deny = list('denyOut');
  const allow = list('allowOut');
  for (const d of deny) {
    if (d !== ALL_TRAFFIC) {
      throw invalid(`network.denyOut ${JSON.stringify(d)}: shellbase denies by allow list only`, `deny all traffic (${ALL_TRAFFIC}) and name the domains to allow in allowOut; private, loopback and link-local addresses are always refused`);
    }
  }
  for (const a of allow) {
    if (isIP(a) || a.includes('/')) {
      throw invalid(`network.allowOut ${JSON.stringify(a)}: shellbase allows domains, not addresses`, 'name the domain (api.example.com, *.example.com)');
    }
  }
  const denyAll = allowInternet === false || deny.length > 0;
  if (!denyAll) return undefined;
  return allow.length ? checkPolicy({ egress: 'allow', domains: allow }) : { egress: 'none' };
}

/** A policy as E2B's info shows it (`allowInternetAccess` and the network's lists). */
export function e2bNetworkView(policy: NetworkPolicy | undefined): { allowInternetAccess: boolean; allowOut?: string[]; denyOut?: string[] } {
  if (!policy || policy.egress === 'public') return { allowInternetAccess: true };
  if (policy.egress === 'none') return { allowInternetAccess: false, denyOut: [ALL_TRAFFIC] };
  return { allowInternetAccess: true, allowOut: [...policy.domains], denyOut: [ALL_TRAFFIC] };
}

import type { NetworkPolicy } from '@shellbase/protocol';
import { ShellbaseError, invalid } from '../errors.js';

/**
 * Egress policies: where a sandbox's connections may go.
 * - `{egress: "none"}`: nowhere (no proxy is even set up: it costs nothing);
 * - `{egress: "allow", domains}`: to the listed host names only (`api.example.com`, or `*.example.com`
 *   for any name below it; a wildcard needs two labels under it, so never `*` or `*.com`);
 * - `{egress: "public"}`: to any public address.
 * Policies nest: the server's default (or the admin's, per tenant) ⊇ a context's ⊇ a request's. The
 * effective one is the narrowest given: a narrower one may only narrow (a wider one is refused, 403).
 * No policy ever reaches private, loopback, link-local or the host's addresses (net/addresses.ts).
 */
export type Policy = NetworkPolicy;

const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const MAX_DOMAINS = 256;

/** A host name (or `*.` wildcard), lower-cased; refused when malformed. */
export function checkDomain(raw: unknown): string {
  if (typeof raw !== 'string') throw invalid('a domain must be a string', 'list host names such as api.example.com or *.example.com');
  const d = raw.trim().toLowerCase().replace(/\.$/, '');
  const wild = d.startsWith('*.');
  const labels = (wild ? d.slice(2) : d).split('.');
  const ok = d.length <= 253 && labels.every((l) => LABEL.test(l)) && /[a-z]/.test(labels[labels.length - 1]) && (!wild || labels.length >= 2) && labels.length >= 1;
  if (!ok || d.includes('*', wild ? 1 : 0) || /^\d+(\.\d+){3}$/.test(d)) {
    throw invalid(`${JSON.stringify(raw)} is not a host name or a wildcard such as *.example.com`, 'list host names; a wildcard needs two labels under it (not * or *.com); addresses are not names', { domain: raw });
  }
  return d;
}

/** A policy as given in a request body, validated and normalised. */
export function checkPolicy(raw: unknown): Policy {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw invalid('network must be an object such as {"egress":"public"}', 'pass {egress: "none" | "allow" | "public", domains?}');
  const o = raw as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== 'egress' && k !== 'domains') throw invalid(`unknown field ${JSON.stringify(k)} in network`, 'network has egress and, for allow, domains', { unknownField: k });
  if (o.egress === 'none' || o.egress === 'public') {
    if (o.domains !== undefined) throw invalid(`domains are for egress "allow", not ${JSON.stringify(o.egress)}`, 'drop domains, or use egress "allow"');
    return { egress: o.egress };
  }
  if (o.egress !== 'allow') throw invalid('network.egress must be "none", "allow" or "public"', 'pass one of them');
  if (!Array.isArray(o.domains) || o.domains.length === 0) throw invalid('egress "allow" needs a non-empty domains list', 'pass domains: ["api.example.com", "*.github.com"]');
  if (o.domains.length > MAX_DOMAINS) throw invalid(`at most ${MAX_DOMAINS} domains`, 'use wildcards such as *.example.com');
  return { egress: 'allow', domains: [...new Set(o.domains.map(checkDomain))].sort() };
}

/** Whether host name `host` (lower case) matches pattern `p`. */
const matches = (p: string, host: string) => (p.startsWith('*.') ? host.endsWith(p.slice(1)) : host === p);

/** Whether a connection to `host` is allowed by the policy's names (addresses are checked after resolution). */
export function allowsHost(policy: Policy, host: string): boolean {
  if (policy.egress === 'none') return false;
  if (policy.egress === 'public') return true;
  const h = host.toLowerCase().replace(/\.$/, '');
  return policy.domains.some((p) => matches(p, h));
}

/** Whether every connection `inner` allows is one `outer` allows too. */
export function within(inner: Policy, outer: Policy): boolean {
  if (inner.egress === 'none' || outer.egress === 'public') return true;
  if (outer.egress === 'none' || inner.egress === 'public') return false;
  return inner.domains.every((d) => outer.domains.some((o) => o === d || (o.startsWith('*.') && d.endsWith(o.slice(1)))));
}

export const describe = (p: Policy) => (p.egress === 'allow' ? `allow ${p.domains.join(', ')}` : p.egress);

/** What both policies allow (a wildcard inside another wildcard or name keeps the narrower). */
export function narrowest(a: Policy, b: Policy): Policy {
  if (within(a, b)) return a;
  if (within(b, a)) return b;
  if (a.egress !== 'allow' || b.egress !== 'allow') return { egress: 'none' };
  const both = [...a.domains.filter((d) => within(allowOnly(d), b)), ...b.domains.filter((d) => within(allowOnly(d), a))];
  return both.length ? { egress: 'allow', domains: [...new Set(both)].sort() } : { egress: 'none' };
}

const allowOnly = (d: string): Policy => ({ egress: 'allow', domains: [d] });

/**
 * The policy a sandbox gets. A context's stored policy is cut down to its
 * tenant's (the admin may have narrowed the tenant since it was set); a
 * request's `network` may only narrow that: a wider one is a 403 naming the limit.
 */
export function effectivePolicy(tenant: Policy, context?: Policy | null, request?: Policy | null): Policy {
  const outer = context ? narrowest(context, tenant) : tenant;
  if (!request) return outer;
  if (!within(request, outer)) {
    const name = context ? "the context's network policy" : "the tenant's network policy";
    throw new ShellbaseError('forbidden', `this request's network (${describe(request)}) is wider than ${name} (${describe(outer)})`, {
      details: { limit: outer, asked: request }, hint: 'a request may only narrow its context\'s policy: widen the context\'s (within the tenant\'s), or narrow this one',
    });
  }
  return request;
}

/** Refuses a context policy wider than its tenant's (403 naming the limit). */
export function checkWithin(policy: Policy, tenant: Policy): void {
  if (!within(policy, tenant)) {
    throw new ShellbaseError('forbidden', `the context's network policy (${describe(policy)}) is wider than the tenant's (${describe(tenant)})`, {
      details: { limit: tenant, asked: policy }, hint: 'ask the admin to widen the tenant\'s policy, or narrow this one',
    });
  }
}

import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { invalid } from '../errors.js';

/** An address range: a family, the first address as a bigint, and a prefix length. */
interface Cidr { v6: boolean; base: bigint; bits: number; text: string }

function toBig(addr: string): { v6: boolean; n: bigint } | null {
  const fam = isIP(addr);
  if (fam === 4) return { v6: false, n: addr.split('.').reduce((n, o) => (n << 8n) | BigInt(Number(o)), 0n) };
  if (fam !== 6) return null;
  // Expand :: and an embedded IPv4 tail.
  let a = addr.toLowerCase();
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (v4) {
    const n = toBig(v4[1])!.n;
    a = a.slice(0, -v4[1].length) + `${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
  }
  const [head, tail] = a.split('::');
  const h = head ? head.split(':') : [];
  const t = tail !== undefined ? (tail ? tail.split(':') : []) : [];
  const groups = tail !== undefined ? [...h, ...Array(8 - h.length - t.length).fill('0'), ...t] : h;
  return { v6: true, n: groups.reduce((n, g) => (n << 16n) | BigInt(parseInt(g || '0', 16)), 0n) };
}

export function parseCidr(text: string): Cidr {
  const [addr, bitsText] = text.trim().split('/');
  const ip = toBig(addr);
  const max = ip?.v6 ? 128 : 32;
  const bits = bitsText === undefined ? max : Number(bitsText);
  if (!ip || !Number.isInteger(bits) || bits < 0 || bits > max || (bitsText !== undefined && !/^\d+$/.test(bitsText))) {
    throw invalid(`${JSON.stringify(text)} is not an address range`, 'write ranges as 203.0.113.0/24 or 2001:db8::/32', { cidr: text });
  }
  const shift = BigInt(max - bits);
  return { v6: ip.v6, base: (ip.n >> shift) << shift, bits, text: text.trim() };
}

function inCidr(c: Cidr, ip: { v6: boolean; n: bigint }): boolean {
  if (c.v6 !== ip.v6) return false;
  const shift = BigInt((c.v6 ? 128 : 32) - c.bits);
  return (ip.n >> shift) === (c.base >> shift);
}

/**
 * Where no sandbox may connect, whatever its policy (after the name is resolved, so a name that
 * resolves to one is refused too): the unspecified and broadcast addresses, loopback, RFC 1918
 * private ranges, carrier-grade NAT, link-local (the cloud metadata endpoint 169.254.169.254 among
 * them), multicast, reserved, IPv6 unique-local, link-local and multicast, and the IPv4-mapped and
 * -translated forms of all of these.
 */
const BLOCKED = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/24', '192.168.0.0/16',
  '198.18.0.0/15', '224.0.0.0/4', '240.0.0.0/4', '255.255.255.255/32',
  '::/128', '::1/128', 'fc00::/7', 'fe80::/10', 'ff00::/8', '64:ff9b::/96', '100::/64',
].map(parseCidr);

/** The v4 address an IPv4-mapped (::ffff:a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) IPv6 address carries. */
function embeddedV4(ip: { v6: boolean; n: bigint }): { v6: boolean; n: bigint } | null {
  if (!ip.v6) return null;
  if (ip.n >> 32n === 0xffffn || ip.n >> 32n === 0x64ff9b0000000000000000n) return { v6: false, n: ip.n & 0xffffffffn };
  return null;
}

export class AddressRules {
  private readonly allow: Cidr[];
  private readonly own: Set<string>;

  /**
   * `allowCidrs`: ranges the admin lets through even though they are private
   * (SHELLBASE_EGRESS_ALLOW_CIDRS). The host's own interface addresses stay
   * refused; note that a listed loopback range (127.0.0.2/32, as the tests use)
   * reaches whatever on the host listens on the wildcard address.
   */
  constructor(allowCidrs: readonly string[]) {
    this.allow = allowCidrs.map(parseCidr);
    this.own = new Set(Object.values(networkInterfaces()).flat().filter((i) => i !== undefined).map((i) => i.address.toLowerCase()));
  }

  /** Null when a connection to `address` may be made, else why not. */
  refusal(address: string): string | null {
    const ip = toBig(address);
    if (!ip) return `${address} is not an address`;
    const v4 = embeddedV4(ip);
    const forms = v4 ? [ip, v4] : [ip];
    // The host's own interface addresses stay closed even inside an allowed range (its API, gateway, databases).
    if (this.own.has(address.toLowerCase()) || (v4 && this.own.has(address.toLowerCase().replace(/^.*:/, '')))) return `${address} is this host's own address`;
    if (forms.some((f) => this.allow.some((c) => inCidr(c, f)))) return null;
    const hit = BLOCKED.find((c) => forms.some((f) => inCidr(c, f)));
    return hit ? `${address} is in ${hit.text}, a private, loopback, link-local or reserved range` : null;
  }
}

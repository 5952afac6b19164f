/**
 * What a sandbox asks the egress proxy for, read from the head sbx-egress
 * passes on (native/egress.c): an HTTP proxy request (`CONNECT host:port`, or
 * a request with an absolute `http://` URL) or a SOCKS5 request (RFC 1928,
 * after the greeting; host names are resolved here, never in the sandbox).
 * And the bytes of every answer: what goes upstream first, what the client
 * gets on success, on a failed connect, or on a refusal.
 */
export interface Ask {
  host: string;
  port: number;
  /** Sent upstream before the client's own bytes (a plain request's rewritten head). */
  upstream: Buffer;
  /** Sent to the client once the upstream connection is made. */
  ok: Buffer;
  /** Sent to the client when the connect fails (`why` says why). */
  failed(why: string): Buffer;
  /** Sent to the client when the policy refuses it. */
  refused(why: string): Buffer;
}

/** A request that is not one the proxy serves: the client's answer. */
export class BadAsk extends Error {
  constructor(message: string, readonly answer: Buffer) { super(message); }
}

const EMPTY = Buffer.alloc(0);

export function parseAsk(head: Buffer): Ask {
  return head[0] === 5 ? socks(head) : http(head);
}

/** A SOCKS5 reply: 0 succeeded, 2 not allowed by the ruleset, 4 host unreachable, 5 refused, 7 command not supported, 8 address type. */
export function socksReply(code: number): Buffer {
  return Buffer.from([5, code, 0, 1, 0, 0, 0, 0, 0, 0]);
}

function socks(b: Buffer): Ask {
  const [, cmd, , atyp] = b;
  if (cmd !== 1) throw new BadAsk('only the SOCKS5 CONNECT command', socksReply(7));
  let host: string;
  let at = 4;
  if (atyp === 1) { host = [...b.subarray(4, 8)].join('.'); at = 8; }
  else if (atyp === 3) { host = b.subarray(5, 5 + b[4]).toString('latin1'); at = 5 + b[4]; }
  else if (atyp === 4) { host = Array.from({ length: 8 }, (_, i) => b.readUInt16BE(4 + i * 2).toString(16)).join(':'); at = 20; }
  else throw new BadAsk('a SOCKS5 address type this proxy does not know', socksReply(8));
  return {
    host, port: b.readUInt16BE(at), upstream: EMPTY, ok: socksReply(0),
    failed: () => socksReply(5), refused: () => socksReply(2),
  };
}

function httpAnswer(status: string, body: string): Buffer {
  return Buffer.from(`HTTP/1.1 ${status}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

/** Headers for the proxy alone, never passed on (and the ones `Connection` names). */
const HOP = new Set(['proxy-connection', 'proxy-authorization', 'connection', 'keep-alive', 'te', 'trailer', 'upgrade']);

function http(b: Buffer): Ask {
  const lines = b.toString('latin1').split('\r\n');
  const m = /^([A-Z]+) (\S+) (HTTP\/1\.[01])$/.exec(lines[0]);
  if (!m) throw new BadAsk('not an HTTP request', httpAnswer('400 Bad Request', 'shellbase egress: send an HTTP proxy request (CONNECT host:port, or an absolute http:// URL)\n'));
  const [, method, target, version] = m;
  const refused = (host: string, port: number) => (why: string) => httpAnswer('403 Forbidden', `shellbase egress refused ${host}:${port}: ${why}\n`);
  const failed = (host: string, port: number) => (why: string) => httpAnswer('502 Bad Gateway', `shellbase egress could not reach ${host}:${port}: ${why}\n`);
  if (method === 'CONNECT') {
    const { host, port } = splitHostPort(target, 443);
    return { host, port, upstream: EMPTY, ok: Buffer.from(`${version} 200 Connection Established\r\n\r\n`), failed: failed(host, port), refused: refused(host, port) };
  }
  let url: URL;
  try { url = new URL(target); } catch { url = new URL('none:'); }
  if (url.protocol !== 'http:') {
    throw new BadAsk('not an absolute http:// URL', httpAnswer('400 Bad Request', 'shellbase egress: send absolute http:// URLs, or CONNECT for anything else (https)\n'));
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = Number(url.port || 80);
  const headers = lines.slice(1).filter((l) => l.length > 0);
  const named = new Set(headers.filter((h) => /^connection:/i.test(h)).flatMap((h) => h.slice(h.indexOf(':') + 1).split(',').map((t) => t.trim().toLowerCase())));
  const kept = headers.filter((h) => { const name = h.slice(0, h.indexOf(':')).trim().toLowerCase(); return !HOP.has(name) && !named.has(name); });
  if (!kept.some((h) => /^host:/i.test(h))) kept.unshift(`Host: ${url.host}`);
  // One request per upstream connection: the next one (maybe to another host) is checked on its own.
  const upstream = Buffer.from(`${method} ${url.pathname}${url.search} ${version}\r\n${kept.join('\r\n')}\r\nConnection: close\r\n\r\n`, 'latin1');
  return { host, port, upstream, ok: EMPTY, failed: failed(host, port), refused: refused(host, port) };
}

/** `host:port`, `[v6]:port` or a bare host. */
function splitHostPort(text: string, fallback: number): { host: string; port: number } {
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(text);
  if (v6) return { host: v6[1], port: Number(v6[2] ?? fallback) };
  const i = text.lastIndexOf(':');
  return i > 0 ? { host: text.slice(0, i), port: Number(text.slice(i + 1)) } : { host: text, port: fallback };
}

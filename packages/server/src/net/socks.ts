import type { Socket } from 'node:net';

/** Reads exactly `n` bytes from a socket (the SOCKS handshake is small and strictly ordered). */
function readBytes(s: Socket, n: number, state: { buf: Buffer }): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const tryRead = () => {
      if (state.buf.length >= n) {
        const out = state.buf.subarray(0, n);
        state.buf = state.buf.subarray(n);
        s.off('data', onData);
        s.off('close', onClose);
        resolve(out);
      }
    };
    const onData = (c: Buffer) => { state.buf = Buffer.concat([state.buf, c]); tryRead(); };
    const onClose = () => reject(new Error('closed during the SOCKS handshake'));
    s.on('data', onData);
    s.once('close', onClose);
    tryRead();
  });
}

/**
 * The server side of a SOCKS5 handshake (RFC 1928): no authentication, the
 * CONNECT command, a target as a host name (`socks5h://`: the name is
 * resolved here, by the egress proxy, never in the sandbox), an IPv4 or an
 * IPv6 address. Resolves to the target; the caller replies with `socksReply`.
 */
export async function socksHandshake(s: Socket): Promise<{ host: string; port: number }> {
  s.pause();
  const state = { buf: Buffer.alloc(0) };
  s.resume();
  const [ver, nMethods] = await readBytes(s, 2, state);
  if (ver !== 5) throw new Error('not SOCKS5');
  const methods = await readBytes(s, nMethods, state);
  if (!methods.includes(0)) { s.end(Buffer.from([5, 0xff])); throw new Error('no acceptable method'); }
  s.write(Buffer.from([5, 0]));
  const [v, cmd, , atyp] = await readBytes(s, 4, state);
  if (v !== 5 || cmd !== 1) { s.end(socksReply(7)); throw new Error('only CONNECT'); }
  let host: string;
  if (atyp === 1) host = [...(await readBytes(s, 4, state))].join('.');
  else if (atyp === 3) host = (await readBytes(s, (await readBytes(s, 1, state))[0], state)).toString('latin1');
  else if (atyp === 4) {
    const b = await readBytes(s, 16, state);
    host = Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2).toString(16)).join(':');
  } else { s.end(socksReply(8)); throw new Error('bad address type'); }
  const port = (await readBytes(s, 2, state)).readUInt16BE(0);
  if (state.buf.length) s.unshift(state.buf);
  return { host, port };
}

/** A SOCKS5 reply: 0 succeeded, 2 not allowed by the ruleset, 5 refused, 7 command not supported, 8 address type. */
export function socksReply(code: number): Buffer {
  return Buffer.from([5, code, 0, 1, 0, 0, 0, 0, 0, 0]);
}

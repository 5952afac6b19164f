import type { PackProgram } from '../../store/blobs/pack.js';
import { SBX_SEND } from '../../util/native.js';
import type { ClientConnection } from '../../util/sink.js';
import { spawner } from '../../util/spawner.js';

/**
 * False once this host refused a helper a connection for good (pidfd_open or pidfd_getfd not
 * there, or not permitted: a seccomp profile, an older kernel, ptrace rules): layers then go
 * through the server.
 */
let takeable = true;

/** Exit codes of sbx-send that wrote nothing: the host never lets it take a connection; it could not for now. */
const NEVER_TAKEN = 69;
const NOT_TAKEN_NOW = 75;

/**
 * A layer's pieces (format.ts) written into the client's connection by sbx-send (native/send.c),
 * which runs the layer's packer and hashes and frames what it writes, so the layer's bytes do not
 * pass through this process. Returns the pieces' SHA256SUMS lines, or null when the connection
 * could not be taken (nothing was written: the caller sends the layer itself). Throws when the
 * packer or the connection failed; the archive is then cut short.
 */
export async function sendLayer(conn: ClientConnection, name: string, program: PackProgram, mtime: number, pieceBytes: number): Promise<string[] | null> {
  if (!takeable) return null;
  await conn.flushed();
  let stdout = '';
  let stderr = '';
  const argv = [SBX_SEND, String(conn.pid), String(conn.fd), String(conn.inode), String(pieceBytes), String(mtime), name, program.prefix.toString('hex'), '--', ...program.argv];
  const proc = spawner.start(argv, undefined, {
    onStdout: (c) => { stdout += c.toString(); },
    onStderr: (c) => { if (stderr.length < 4096) stderr += c.toString(); },
  });
  // The helper holds the connection too: it must not outlive the response.
  const stop = () => proc.kill();
  conn.signal.addEventListener('abort', stop);
  try {
    const { code, signal } = await proc.exited;
    if (code === NEVER_TAKEN) { takeable = false; return null; }
    if (code === NOT_TAKEN_NOW) return null;
    if (code !== 0) throw new Error(`sending ${name.replace(/\.$/, '')} failed (${code ?? signal}): ${stderr.trim()}`);
  } finally {
    conn.signal.removeEventListener('abort', stop);
  }
  return stdout.split('\n').filter((l) => l.length > 0);
}

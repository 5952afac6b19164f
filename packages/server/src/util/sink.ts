import type { Writable } from 'node:stream';

/**
 * An HTTP client's connection that a helper may write into: a plain TCP socket of this process
 * (`fd`, `inode`) whose response is an HTTP/1.1 chunked body, everything the server wrote before on
 * it once `flushed` resolves; `signal` aborts when the response closes early (the client went away).
 */
export interface ClientConnection {
  pid: number;
  fd: number;
  /** The socket's inode: a helper refuses a descriptor the server has since given to another connection. */
  inode: bigint;
  flushed(): Promise<void>;
  signal: AbortSignal;
}

/** Where a response's bytes go, in order: written here, or (`connection`) by a helper straight into the client's connection. */
export interface ByteSink {
  /** Resolves once more may be written, rejects once the reader is gone. */
  write(bytes: Buffer): Promise<void>;
  connection?: ClientConnection;
}

/** A write's promise: at once when `ok` (the stream wants more), else once it drained; rejects once it closed. */
export function written(out: Writable, ok: boolean): Promise<void> {
  if (out.destroyed) return Promise.reject(new Error('the reader went away'));
  if (ok) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const drained = () => { out.off('close', closed); resolve(); };
    const closed = () => { out.off('drain', drained); reject(new Error('the reader went away')); };
    out.once('drain', drained).once('close', closed);
  });
}

import { spawner } from './spawner.js';

export interface RunOptions {
  /** Bytes written to the child's stdin. */
  input?: string;
  /** Called with each chunk of stdout and stderr as it arrives (progress display). */
  onOutput?: (chunk: Buffer, stream: 'stdout' | 'stderr') => void;
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
}

/**
 * Runs a host tool to completion through the spawner (the server never forks
 * itself), collecting its output. Never throws for a non-zero exit.
 */
export async function run(cmd: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  const proc = spawner.start([cmd, ...args], options.input, {
    // Frames are slices of the spawner's read buffer: copy what is kept.
    onStdout: (c) => { out.push(Buffer.from(c)); options.onOutput?.(c, 'stdout'); },
    onStderr: (c) => { err.push(Buffer.from(c)); options.onOutput?.(c, 'stderr'); },
  });
  const { code, signal } = await proc.exited;
  return { code, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() };
}

/** Runs a host tool and throws with its stderr if it fails. */
export async function runOk(cmd: string, args: readonly string[], options: RunOptions = {}): Promise<Buffer> {
  const r = await run(cmd, args, options);
  if (r.code !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.code ?? r.signal}): ${r.stderr.trim()}`);
  }
  return r.stdout;
}

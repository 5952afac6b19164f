import { spawn, type SpawnOptions } from 'node:child_process';

export interface RunOptions extends SpawnOptions {
  /** Bytes written to the child's stdin. */
  input?: string | Buffer;
  /** Called with each chunk of stdout and stderr as it arrives (progress display). */
  onOutput?: (chunk: Buffer, stream: 'stdout' | 'stderr') => void;
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
}

/** Runs a host tool to completion, collecting its output. Never throws for a non-zero exit. */
export function run(cmd: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  const { input, onOutput, ...spawnOptions } = options;
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'], ...spawnOptions });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (c: Buffer) => { out.push(c); onOutput?.(c, 'stdout'); });
    child.stderr?.on('data', (c: Buffer) => { err.push(c); onOutput?.(c, 'stderr'); });
    child.on('error', reject);
    child.on('close', (code, signal) =>
      resolve({ code, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() }));
    child.stdin?.on('error', () => undefined); // the tool may exit without reading its input
    child.stdin?.end(input);
  });
}

/** Runs a host tool and throws with its stderr if it fails. */
export async function runOk(cmd: string, args: readonly string[], options: RunOptions = {}): Promise<Buffer> {
  const r = await run(cmd, args, options);
  if (r.code !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.code ?? r.signal}): ${r.stderr.trim()}`);
  }
  return r.stdout;
}

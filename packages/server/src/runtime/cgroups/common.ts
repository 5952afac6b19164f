import { readFileSync, readdirSync, rmdirSync, writeFileSync, existsSync } from 'node:fs';
import path from 'node:path';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function readInt(file: string): number {
  try { return Number(readFileSync(file, 'utf8').trim()) || 0; } catch { return 0; }
}

/** The value of `key` in a flat-keyed file such as memory.events or cpu.stat. */
export function readKey(file: string, key: string): number {
  try {
    for (const line of readFileSync(file, 'utf8').split('\n')) {
      const [k, v] = line.split(/\s+/);
      if (k === key) return Number(v) || 0;
    }
  } catch { /* missing file: the kernel lacks the counter */ }
  return 0;
}

export function write(file: string, value: string): void {
  writeFileSync(file, value);
}

export function pidsOf(dir: string): number[] {
  try {
    return readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch { return []; }
}

export function signalAll(dir: string, sig: NodeJS.Signals): void {
  for (const pid of pidsOf(dir)) { try { process.kill(pid, sig); } catch { /* already gone */ } }
}

/** SIGKILLs every process in `dir` until none is left (new ones may appear while a fork bomb runs). */
export async function killAll(dir: string): Promise<void> {
  for (let round = 0; round < 200; round++) {
    const pids = pidsOf(dir);
    if (pids.length === 0) return;
    for (const pid of pids) { try { process.kill(pid, 'SIGKILL'); } catch { /* already gone */ } }
    await sleep(round < 10 ? 2 : 20);
  }
}

/** rmdir a cgroup, retrying while the kernel finishes reaping its processes. */
export async function removeDir(dir: string): Promise<void> {
  for (let round = 0; round < 100; round++) {
    try { rmdirSync(dir); return; } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY') throw e;
      await killAll(dir);
      await sleep(10);
    }
  }
  throw new Error(`cgroup ${dir} stayed busy`);
}

/** Child cgroup directories of `dir`, deepest first. */
export function childCgroups(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    const child = path.join(dir, e.name);
    out.push(...childCgroups(child), child);
  }
  return out;
}

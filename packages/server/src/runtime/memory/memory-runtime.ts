import { lstatSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { MemorySnapshotter } from '../../store/snapshotter/memory/memory-snapshotter.js';
import { MountedTree, type Tree } from './mounted-tree.js';
import type { ArchiveUnpacking, SandboxResult, SandboxRuntime, SandboxSpec } from '../types.js';
import { parseScript, type Command } from './script.js';
import { invalid } from '../../errors.js';
import { normalizeTarPath, readTar } from '../../util/tar.js';
import { dirNode, fileNode, find, parentOf, type Node } from '../../store/snapshotter/memory/tree.js';
import { SANDBOX_ROOT } from '../../util/idmap.js';


/** An exit of a command the interpreter runs. */
class Exit extends Error { constructor(readonly code: number) { super(`exit ${code}`); } }

/**
 * A runtime for the fast test tier, over the in-memory snapshotter: it runs a
 * small shell language (runtime/memory/script.ts: echo, cat, rm, mkdir, cp,
 * ls, test, sleep, exit, true, false; `;`, `&&`, `||`, `>`, `>>`, `>&2`)
 * against the mount's merged tree (and its volumes at their targets), with overlayfs' write rules. It passes the
 * runtime's conformance suites (sandboxes, tar unpacking); programs that need a host
 * (bridges, helpers, jails: HostPrograms) are the bwrap runtime's only.
 */
export class MemoryRuntime implements SandboxRuntime, ArchiveUnpacking {
  constructor(private readonly snapshotter: MemorySnapshotter) {}

  async run(spec: SandboxSpec): Promise<SandboxResult> {
    const started = performance.now();
    const own = this.snapshotter.merged(spec.mount, (spec.overlays ?? []).map(hostTree));
    const tree = spec.volumes?.length
      ? new MountedTree(own, spec.volumes.map((v) => ({ target: v.target, readOnly: v.readOnly, tree: v.readOnly ? this.snapshotter.layersOnly(v.mount) : this.snapshotter.merged(v.mount) })))
      : own;
    const out = { stdout: '', stderr: '', truncated: false };
    const emit = (stream: 'stdout' | 'stderr', text: string) => {
      const room = spec.limits.outputBytes - Buffer.byteLength(out[stream]);
      if (room <= 0) { out.truncated ||= text.length > 0; return; }
      const kept = Buffer.from(text).subarray(0, room).toString();
      if (kept.length < text.length) out.truncated = true;
      out[stream] += kept;
      spec.onOutput?.(stream, kept);
    };
    let timedOut = false;
    let aborted = false;
    const stop = new AbortController();
    const timer = setTimeout(() => { timedOut = true; stop.abort(); }, spec.limits.timeoutMs);
    const onAbort = () => { aborted = true; stop.abort(); };
    spec.signal?.addEventListener('abort', onAbort, { once: true });
    if (spec.signal?.aborted) onAbort();
    let exitCode = 0;
    try {
      const script = spec.argv[0] === 'bash' || spec.argv[0] === 'sh' ? (spec.argv[1] === '-c' ? spec.argv[2] ?? '' : '') : null;
      const commands = script === null ? [{ argv: spec.argv, op: ';' as const }] : parseScript(script);
      const stdin = typeof spec.stdin === 'string' ? Buffer.from(spec.stdin) : spec.stdin ?? Buffer.alloc(0);
      exitCode = await interpret(commands, { tree, cwd: spec.cwd, stdin, emit, stop: stop.signal });
    } catch (e) {
      if (e instanceof Exit) exitCode = e.code;
      else if (!stop.signal.aborted) throw e;
    } finally {
      clearTimeout(timer);
      spec.signal?.removeEventListener('abort', onAbort);
    }
    const killed = timedOut || aborted;
    return {
      exitCode: killed ? 137 : exitCode, ...(killed ? { signal: 'SIGKILL' } : {}), timedOut, oomKilled: false, aborted,
      stdout: out.stdout, stderr: out.stderr, truncated: out.truncated, cpuMs: 0, wallMs: Math.round(performance.now() - started), memoryPeakBytes: 0,
    };
  }

  /** No programs of its own: a layer is decompressed and checked in process, then unpackTar'ed. */
  readonly fetchesLayers = false;
  /**
   * Unpacks as the bwrap runtime's GNU tar does, into the scratch tree the description names:
   * owners shifted as a sandbox maps them, a leading `/` dropped; members with `..` and device
   * nodes are refused (GNU tar refuses the one, a sandbox cannot make the other).
   */
  async unpackTar(body: Readable, into: { source: string }): Promise<void> {
    const root = this.snapshotter.target(into.source);
    const links: [string, string][] = [];
    for await (const { header: h, body: data } of readTar(body)) {
      if (h.path === '') continue;
      const refuse = (why: string) => invalid(`the tar stream could not be unpacked: ${h.name}: ${why}`, 'send a tar archive of regular files, directories and symlinks');
      if (h.name.split('/').includes('..')) throw refuse("Member name contains '..'");
      if (h.type === 'char' || h.type === 'block' || h.type === 'fifo') throw refuse('Cannot mknod: Operation not permitted');
      const attrs = { mode: h.mode, uid: SANDBOX_ROOT + h.uid, gid: SANDBOX_ROOT + h.gid, atimeMs: h.mtime * 1000, mtimeMs: h.mtime * 1000 };
      const { dir, name } = parentOf(root, h.path, true);
      if (h.type === 'dir') {
        const existing = dir.children!.get(name);
        if (existing?.kind === 'dir') Object.assign(existing, attrs); else dir.children!.set(name, dirNode(attrs));
      } else if (h.type === 'symlink') {
        dir.children!.set(name, { ...fileNode(Buffer.alloc(0), attrs), kind: 'symlink', data: undefined, target: h.linkname });
      } else if (h.type === 'hardlink') {
        links.push([h.path, normalizeTarPath(h.linkname)]);
      } else {
        const chunks: Buffer[] = [];
        for await (const c of data) chunks.push(Buffer.from(c));
        dir.children!.set(name, fileNode(Buffer.concat(chunks), attrs));
      }
    }
    for (const [to, from] of links) {
      const src = find(root, from);
      if (src?.kind !== 'file') throw invalid(`the tar stream could not be unpacked: ${to}: Cannot hard link to ${from}`, 'send a tar archive');
      const { dir, name } = parentOf(root, to, true);
      dir.children!.set(name, { ...src });
    }
  }
  async recover(): Promise<number> { return 0; }
  async close(): Promise<void> {}
}

interface Env {
  tree: Tree;
  cwd: string;
  stdin: Buffer;
  emit(stream: 'stdout' | 'stderr', text: string): void;
  stop: AbortSignal;
}

async function interpret(commands: Command[], env: Env): Promise<number> {
  let status = 0;
  for (let i = 0; i < commands.length; i++) {
    const prev = i === 0 ? ';' : commands[i - 1].op;
    if ((prev === '&&' && status !== 0) || (prev === '||' && status === 0)) continue;
    if (env.stop.aborted) throw new Exit(137);
    status = await runOne(commands[i], env);
  }
  return status;
}

const abs = (env: Env, p: string) => (p.startsWith('/') ? p : `${env.cwd.replace(/\/$/, '')}/${p}`);

async function runOne(cmd: Command, env: Env): Promise<number> {
  const [name, ...args] = cmd.argv;
  let stdout = '';
  const fail = (msg: string) => { env.emit('stderr', `${name}: ${msg}\n`); return 1; };
  const flags = new Set(args.filter((a) => /^-[a-z]+$/.test(a)).flatMap((a) => [...a.slice(1)]));
  const operands = args.filter((a) => !/^-[a-z]+$/.test(a));
  let status = 0;
  try {
    switch (name) {
      case undefined: case 'true': case ':': break;
      case 'false': status = 1; break;
      case 'exit': throw new Exit(Number(args[0] ?? 0));
      case 'echo': stdout = `${(args[0] === '-n' ? args.slice(1) : args).join(' ')}${args[0] === '-n' ? '' : '\n'}`; break;
      case 'cat':
        if (operands.length === 0) stdout = env.stdin.toString();
        for (const f of operands) {
          const n = env.tree.get(abs(env, f));
          if (!n) { status = fail(`${f}: No such file or directory`); continue; }
          if (n.kind !== 'file') { status = fail(`${f}: Is a directory`); continue; }
          stdout += n.data!.toString();
        }
        break;
      case 'ls':
        for (const d of operands.length ? operands : [env.cwd]) stdout += env.tree.list(abs(env, d)).map((x) => `${x}\n`).join('');
        break;
      case 'mkdir':
        for (const d of operands) {
          const parts = abs(env, d).split('/').filter(Boolean);
          for (let i = flags.has('p') ? 1 : parts.length; i <= parts.length; i++) env.tree.mkdir(`/${parts.slice(0, i).join('/')}`);
        }
        break;
      case 'rm':
        for (const f of operands) {
          const n = env.tree.get(abs(env, f));
          if (!n) { if (!flags.has('f')) status = fail(`cannot remove '${f}': No such file or directory`); continue; }
          if (n.kind === 'dir' && !flags.has('r')) { status = fail(`cannot remove '${f}': Is a directory`); continue; }
          env.tree.remove(abs(env, f));
        }
        break;
      case 'cp': env.tree.copy(abs(env, operands[0]), abs(env, operands[1])); break;
      case 'test': {
        const n = env.tree.get(abs(env, args[1] ?? ''));
        status = (args[0] === '-f' ? n?.kind === 'file' : args[0] === '-d' ? n?.kind === 'dir' : n !== null) ? 0 : 1;
        break;
      }
      case 'sleep':
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, Number(args[0]) * 1000);
          env.stop.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
        });
        if (env.stop.aborted) throw new Exit(137);
        break;
      default:
        env.emit('stderr', `${name}: command not found\n`);
        return 127;
    }
  } catch (e) {
    if (e instanceof Exit) throw e;
    return fail((e as Error).message);
  }
  if (cmd.redirect) {
    if (cmd.redirect.to === 'stderr') env.emit('stderr', stdout);
    else {
      try { env.tree.writeFile(abs(env, cmd.redirect.to), Buffer.from(stdout), cmd.redirect.append); } catch (e) {
        return fail((e as NodeJS.ErrnoException).code === 'EDQUOT' ? 'write error: Disk quota exceeded' : (e as Error).message);
      }
    }
  } else env.emit('stdout', stdout);
  return status;
}

/** A host directory in overlay format as an in-memory layer (files, directories and symlinks; owners as stored). */
function hostTree(dir: string): Node {
  const s = lstatSync(dir);
  const attrs = { mode: s.mode & 0o7777, uid: s.uid, gid: s.gid, atimeMs: s.atimeMs, mtimeMs: s.mtimeMs };
  if (s.isDirectory()) {
    const node = dirNode(attrs);
    for (const name of readdirSync(dir)) node.children!.set(name, hostTree(path.join(dir, name)));
    return node;
  }
  if (s.isSymbolicLink()) return { ...fileNode(Buffer.alloc(0), attrs), kind: 'symlink', data: undefined, target: readlinkSync(dir) };
  return fileNode(readFileSync(dir), attrs);
}

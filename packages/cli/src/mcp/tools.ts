import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { TIMEOUT_CEILING_MS, limitMessage, type Shellbase } from '@shellbase/sdk';
import { z } from 'zod';
import { registerMachineTools } from './machine-tools.js';
import { registerDesktopTools } from './desktop-tools.js';
import { registerBuildTools } from './build-tools.js';
import { TEXT_LIMIT, commandOutput, cut, fitted, guarded, limitFields } from './result.js';


/**
 * Registers shellbase's tools. With `pinned`, every tool works on that context
 * and takes no `context` argument. Each tool answers in prose and, per its
 * outputSchema, as structuredContent.
 */
export function registerTools(server: McpServer, sb: Shellbase, pinned?: string): void {
  // Required unless the session pins a context (then absent); typed as optional for both.
  const ctxArg = (pinned ? {} : {
    context: z.string().min(1).max(128).describe('The context (a named, versioned Debian file system); created on first use'),
  }) as unknown as { context: z.ZodOptional<z.ZodString> };
  const ctxOf = (a: { context?: string }) => sb.context(pinned ?? a.context!);
  const nameOf = (a: { context?: string }) => pinned ?? a.context!;
  const version = z.string().max(128).optional();

  server.registerTool('exec', {
    title: 'Run a shell command',
    description: 'Runs a shell command (bash -c) in a fresh sandbox over the context\'s current files (Debian, as root; internet access only through the server\'s egress proxy, under the context\'s network policy: curl, pip, npm, git and apt use it). '
      + 'File changes are committed as a new version of the context; /tmp is not kept. Returns the exit code, stdout, stderr and the version. '
      + `Output past ${TEXT_LIMIT} bytes is cut; the full output is then saved in the context and the result says where.`,
    inputSchema: {
      ...ctxArg, command: z.string().min(1).describe('The command, run with bash -c in /root'),
      version: version.describe('Run over this past version instead of the head (its changes still commit to the head)'),
      timeoutMs: z.number().int().min(1).max(TIMEOUT_CEILING_MS).optional()
        .describe('Kill the command after this many milliseconds (default 60 s; at most the tenant\'s maximum, 1 h unless the admin raised it, up to 24 h)'),
      stdin: z.string().optional(),
      mounts: z.array(z.object({
        context: z.string().min(1).max(128).describe('Another context of yours (a volume: a dataset, a cache, a checkout)'),
        path: z.string().min(2).max(4096).describe('Where the command sees it, e.g. /mnt/data (its whole tree: its /root is at /mnt/data/root)'),
        readOnly: z.boolean().optional().describe('Show it without taking writes (else what the command writes there commits into it, with this context\'s commit)'),
        version: z.string().max(128).optional().describe('Show this version of it instead of its head'),
      })).max(16).optional().describe('Other contexts mounted into the sandbox'),
    },
    outputSchema: {
      ...commandOutput,
      oomKilled: z.boolean(),
      truncated: z.boolean().describe('The command wrote more than the output cap; the rest was dropped'),
      version: z.string().describe('The context\'s version after the command'),
      committed: z.boolean().describe('Whether the command\'s file changes became the new head'),
      conflict: z.object({ paths: z.array(z.string()), version: z.string() }).optional(),
      mounts: z.array(z.object({ context: z.string(), path: z.string(), version: z.string(), committed: z.boolean() })).optional()
        .describe('Each mount\'s version after the command (a new one when its writes were committed)'),
    },
  }, async (a) => guarded(async () => {
    const ctx = ctxOf(a);
    const r = await ctx.exec(a.command, { version: a.version, timeoutMs: a.timeoutMs, stdin: a.stdin, ...(a.mounts ? { mounts: a.mounts } : {}) });
    const parts = [`exit code ${r.exitCode}${r.timedOut ? ` (${limitMessage(r.limit)})` : ''}${r.oomKilled ? ' (out of memory)' : ''}`];
    const out = await fitted(`--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`, async (file, text) => { await ctx.files.write(file, text); }, 'read it with read_file and offset');
    parts.push(out.text);
    if (r.truncated) parts.push('[the command wrote more than the output cap; the rest was dropped: redirect to a file and read it with read_file]');
    parts.push(r.conflict ? `conflict: its changes overlap others on ${r.conflict.paths.join(', ')}; kept as version ${r.conflict.version}`
      : `version ${r.version}${r.committed ? ' (its changes were committed)' : ' (nothing changed)'}`);
    for (const m of r.mounts ?? []) parts.push(`mount ${m.context} at ${m.path}: version ${m.version}${m.committed ? ' (its changes there were committed)' : ''}`);
    return {
      text: parts.join('\n'),
      structured: {
        exitCode: r.exitCode, stdout: cut(r.stdout), stderr: cut(r.stderr), timedOut: r.timedOut, ...limitFields(r), oomKilled: r.oomKilled, truncated: r.truncated,
        version: r.version, committed: r.committed, ...(out.file ? { outputFile: out.file } : {}), ...(r.conflict ? { conflict: r.conflict } : {}),
        ...(r.mounts ? { mounts: r.mounts.map((m) => ({ context: m.context, path: m.path, version: m.version, committed: m.committed })) } : {}),
      },
    };
  }));

  server.registerTool('read_file', {
    title: 'Read a file',
    description: `Reads a text file of the context without running anything. At most ${TEXT_LIMIT} bytes per call: pass offset to read further.`,
    inputSchema: { ...ctxArg, path: z.string().min(1), version, offset: z.number().int().min(0).optional(), length: z.number().int().min(1).max(TEXT_LIMIT).optional() },
    outputSchema: {
      path: z.string(), size: z.number().int(), offset: z.number().int(), content: z.string(),
      nextOffset: z.number().int().optional().describe('Pass as offset to read on; absent at the end of the file'),
    },
  }, async (a) => guarded(async () => {
    const ctx = ctxOf(a);
    const size = (await ctx.files.stat(a.path, { version: a.version })).size;
    const start = a.offset ?? 0;
    const end = Math.min(size, start + (a.length ?? TEXT_LIMIT)) - 1;
    if (size === 0 || start >= size) return { text: `(${size} bytes; nothing at offset ${start})`, structured: { path: a.path, size, offset: start, content: '' } };
    const res = await ctx.files.open(a.path, { version: a.version, range: [start, end] });
    const chunk = Buffer.from(await res.arrayBuffer()).toString('utf8');
    const more = end + 1 < size;
    return {
      text: more ? `${chunk}\n[bytes ${start}-${end} of ${size}; pass offset=${end + 1} for more]` : chunk,
      structured: { path: a.path, size, offset: start, content: chunk, ...(more ? { nextOffset: end + 1 } : {}) },
    };
  }));

  server.registerTool('write_file', {
    title: 'Write a file',
    description: 'Writes (creates or replaces) a file in the context, making parent directories; commits a new version. No sandbox runs.',
    inputSchema: { ...ctxArg, path: z.string().min(1), content: z.string(), mode: z.string().regex(/^0?[0-7]{3,4}$/).optional().describe('Octal, e.g. 0755') },
    outputSchema: { path: z.string(), bytes: z.number().int(), version: z.string() },
  }, async (a) => guarded(async () => {
    const r = await ctxOf(a).files.write(a.path, a.content, a.mode ? { mode: parseInt(a.mode, 8) } : {});
    const bytes = Buffer.byteLength(a.content);
    return { text: `wrote ${bytes} bytes to ${a.path}; version ${r.version}`, structured: { path: a.path, bytes, version: r.version } };
  }));

  server.registerTool('list_dir', {
    title: 'List a directory',
    description: 'Lists a directory of the context: type, mode, size and name per line.',
    inputSchema: { ...ctxArg, path: z.string().min(1), version },
    outputSchema: {
      entries: z.array(z.object({ name: z.string(), type: z.string(), mode: z.number().int(), size: z.number().int() })),
      total: z.number().int().describe('Entries in the directory (entries holds at most 1000)'),
    },
  }, async (a) => guarded(async () => {
    const entries = await ctxOf(a).files.list(a.path, { version: a.version });
    const lines = entries.map((e) => `${e.type.padEnd(7)} ${e.mode.toString(8).padStart(4, '0')} ${String(e.size).padStart(10)} ${e.name}`);
    const out = lines.join('\n') || '(empty)';
    return {
      text: out.length > TEXT_LIMIT ? `${out.slice(0, TEXT_LIMIT)}\n[cut: ${entries.length} entries]` : out,
      structured: { entries: entries.slice(0, 1000).map((e) => ({ name: e.name, type: e.type, mode: e.mode, size: e.size })), total: entries.length },
    };
  }));

  server.registerTool('fork_context', {
    title: 'Fork a context',
    description: 'Makes a new context with the same files (at the head or a version), instantly. Changes to either stay apart until merged.',
    inputSchema: { ...ctxArg, name: z.string().min(1).max(128).describe('Name of the new context'), version },
    outputSchema: { context: z.string(), from: z.string(), head: z.string() },
  }, async (a) => guarded(async () => {
    const fork = await ctxOf(a).fork(a.name, a.version ? { version: a.version } : {});
    const { head } = await fork.info();
    return { text: `forked ${nameOf(a)} into ${a.name}${a.version ? ` at ${a.version}` : ''}`, structured: { context: a.name, from: nameOf(a), head } };
  }));

  server.registerTool('diff', {
    title: 'Compare versions',
    description: 'Lists paths added, modified or deleted between two versions (default: the head against its parent). '
      + 'Versions of forks compare too. With path, also a unified diff of that file.',
    inputSchema: { ...ctxArg, from: version, to: version, path: z.string().optional() },
    outputSchema: {
      changes: z.array(z.object({ path: z.string(), kind: z.enum(['added', 'modified', 'deleted']), type: z.string() })),
      patch: z.string().optional(),
    },
  }, async (a) => guarded(async () => {
    const d = await ctxOf(a).diff({ from: a.from, to: a.to, path: a.path });
    const lines = d.changes.map((c) => `${c.kind.padEnd(8)} ${c.type.padEnd(7)} ${c.path}`);
    const out = [lines.join('\n') || '(no changes)', d.patch ? `\n${d.patch}` : ''].join('');
    return {
      text: out.length > TEXT_LIMIT ? `${out.slice(0, TEXT_LIMIT)}\n[cut: ${d.changes.length} changes; pass path for one file]` : out,
      structured: { changes: d.changes.slice(0, 1000).map((c) => ({ path: c.path, kind: c.kind, type: c.type })), ...(d.patch !== undefined ? { patch: cut(d.patch) } : {}) },
    };
  }));

  server.registerTool('versions', {
    title: 'List versions',
    description: 'The context\'s versions, newest first: id, time, what made it.',
    inputSchema: { ...ctxArg, limit: z.number().int().min(1).max(1000).optional() },
    outputSchema: {
      versions: z.array(z.object({ id: z.string(), parent: z.string().nullable(), createdAt: z.string(), cause: z.string(), command: z.string().optional(), bytes: z.number() })),
    },
  }, async (a) => guarded(async () => {
    const versions = await ctxOf(a).versions({ limit: a.limit ?? 20 });
    return {
      text: versions.map((v) => `${v.id} ${v.createdAt} ${v.cause.kind}${v.cause.command ? `: ${v.cause.command.slice(0, 120)}` : ''}`).join('\n'),
      structured: {
        versions: versions.map((v) => ({
          id: v.id, parent: v.parent, createdAt: v.createdAt, cause: v.cause.kind, bytes: v.bytes, ...(v.cause.command ? { command: v.cause.command } : {}),
        })),
      },
    };
  }));

  server.registerTool('reset', {
    title: 'Reset to a version',
    description: 'Makes the context\'s files those of an earlier version (as a new version: nothing is lost, reset again to undo).',
    inputSchema: { ...ctxArg, version: z.string().min(1).max(128) },
    outputSchema: { context: z.string(), head: z.string() },
  }, async (a) => guarded(async () => {
    const { head } = await ctxOf(a).reset(a.version);
    return { text: `reset ${nameOf(a)} to ${a.version}; head is now ${head}`, structured: { context: nameOf(a), head } };
  }));

  server.registerTool('start_service', {
    title: 'Define a service',
    description: 'Defines a long-running process (a dev server, a database) over the context, reachable on the returned URL and, '
      + 'from the context\'s own commands, at 127.0.0.1:port. It starts on the first request and sleeps when idle; its file changes commit. '
      + 'With share, other contexts of the tenant reach it by name at NAME.CONTEXT.internal:port (plain TCP), waking it too.',
    inputSchema: {
      ...ctxArg, name: z.string().min(1).max(128), command: z.string().min(1).describe('Run with bash -c; must listen on port'),
      port: z.number().int().min(1).max(65535), idleTimeoutMs: z.number().int().min(100).max(86_400_000).optional(),
      share: z.union([z.literal('tenant'), z.array(z.string().min(1).max(128)).min(1)]).optional()
        .describe('"tenant": every context of the tenant reaches it by name; or a list of contexts that may'),
    },
    outputSchema: { name: z.string(), port: z.number().int(), url: z.string(), pathUrl: z.string(), internalName: z.string() },
  }, async (a) => guarded(async () => {
    const s = await ctxOf(a).services.create({
      name: a.name, command: a.command, port: a.port, ...(a.idleTimeoutMs ? { idleTimeoutMs: a.idleTimeoutMs } : {}), ...(a.share ? { share: a.share } : {}),
    });
    const internalName = `${s.name}.${s.context}.internal`;
    const shared = s.share === undefined ? '' : `; from ${s.share === 'tenant' ? 'every context of the tenant' : `contexts ${s.share.join(', ')}`}: ${internalName}:${s.port}`;
    return {
      text: `service ${s.name} defined: ${s.url} (or ${s.pathUrl}); inside the context: 127.0.0.1:${s.port}${shared}`,
      structured: { name: s.name, port: s.port, url: s.url, pathUrl: s.pathUrl, internalName },
    };
  }));

  registerMachineTools(server, sb, pinned);
  registerDesktopTools(server, sb);
  registerBuildTools(server, sb);
}

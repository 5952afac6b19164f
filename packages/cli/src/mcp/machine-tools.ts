import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { TIMEOUT_CEILING_MS, limitMessage, type Shellbase } from '@shellbase/sdk';
import { z } from 'zod';
import { TEXT_LIMIT, commandOutput, cut, fitted, guarded, limitFields } from './result.js';

const machineId = z.string().min(1).max(128).describe('The machine\'s id (m_...)');

/**
 * Tools for machines: full Debian computers (their own kernel, systemd,
 * processes and memory) for work that needs state between commands.
 */
export function registerMachineTools(server: McpServer, sb: Shellbase, pinned?: string): void {
  server.registerTool('create_machine', {
    title: 'Start a machine',
    description: 'Starts a microVM (Debian with systemd, as root) from a context\'s files, restored from a snapshot in about a second. '
      + 'Unlike exec, its processes and memory persist between commands: start servers, keep shells, fork it. It hibernates when idle and wakes on the next call. '
      + 'It reaches the internet only through the server\'s egress proxy, under the context\'s network policy (curl, pip, npm, git and apt use it). Returns its id.',
    inputSchema: {
      context: z.string().min(1).max(128).optional().describe(pinned ? `Default: ${pinned}` : 'Its disk starts as this context\'s files (default: a bare Debian)'),
      image: z.string().min(1).max(64).optional().describe('A built-in image instead of a context: "code-interpreter" (kernels for run_code), "desktop" (a screen for screenshot, click, type, key) or "debian"'),
      memoryMb: z.number().int().min(128).max(65536).optional(),
      diskGb: z.number().int().min(8).max(65536).optional().describe('Its disk\'s size in GiB (default 8)'),
    },
    outputSchema: { machine: z.string(), context: z.string().optional() },
  }, async (a) => guarded(async () => {
    const context = a.image ? undefined : a.context ?? pinned;
    const m = await sb.machines.create({ ...(a.image ? { image: a.image } : {}), ...(context ? { context } : {}), ...(a.memoryMb ? { memoryMb: a.memoryMb } : {}), ...(a.diskGb ? { diskGb: a.diskGb } : {}) });
    return {
      text: `machine ${m.id} is running${context ? ` (disk from ${context})` : ''}; use machine_exec, machine_fork, delete_machine`,
      structured: { machine: m.id, ...(context ? { context } : {}) },
    };
  }));

  server.registerTool('machine_exec', {
    title: 'Run a command in a machine',
    description: 'Runs a shell command (bash -c, as root in /root) in a running machine; background processes keep running after it returns. '
      + `Returns the exit code, stdout and stderr. Output past ${TEXT_LIMIT} bytes is cut; the full output is then saved in the machine and the result says where.`,
    inputSchema: { machine: machineId, command: z.string().min(1), timeoutMs: z.number().int().min(1).max(TIMEOUT_CEILING_MS).optional(), stdin: z.string().optional() },
    outputSchema: { ...commandOutput, truncated: z.boolean() },
  }, async (a) => guarded(async () => {
    const m = sb.machines.get(a.machine);
    const r = await m.exec(a.command, { timeoutMs: a.timeoutMs, stdin: a.stdin });
    const out = await fitted(`--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`, (file, text) => m.files.write(file, text),
      'read parts of it with machine_exec (sed -n, tail)');
    return {
      text: `exit code ${r.exitCode}${r.timedOut ? ` (${limitMessage(r.limit)})` : ''}\n${out.text}`,
      structured: { exitCode: r.exitCode, stdout: cut(r.stdout), stderr: cut(r.stderr), timedOut: r.timedOut, ...limitFields(r), truncated: r.truncated, ...(out.file ? { outputFile: out.file } : {}) },
    };
  }));

  server.registerTool('run_code', {
    title: 'Run code in a machine\'s interpreter',
    description: 'Runs a cell in a long-lived kernel of a machine made from the code-interpreter image (create_machine with image "code-interpreter"): '
      + 'variables, imports and loaded data stay between calls, as in a notebook. Languages: python (default; pandas, numpy, matplotlib, scipy), javascript, typescript, r, bash. '
      + 'Returns the output, the value of the last expression, charts as images, and the error the code raised, if any.',
    inputSchema: {
      machine: machineId, code: z.string().min(1),
      language: z.string().min(1).max(32).optional().describe('python (default), javascript, typescript, r or bash'),
      timeoutMs: z.number().int().min(1).max(TIMEOUT_CEILING_MS).optional(),
    },
    outputSchema: {
      stdout: z.string(), stderr: z.string(), results: z.array(z.object({ text: z.string().optional(), formats: z.array(z.string()) })),
      error: z.object({ name: z.string(), value: z.string(), traceback: z.string() }).optional(),
    },
  }, async (a) => guarded(async () => {
    const x = await sb.machines.get(a.machine).runCode(a.code, { ...(a.language ? { language: a.language } : {}), ...(a.timeoutMs ? { timeoutMs: a.timeoutMs } : {}) });
    const stdout = x.stdout.join('');
    const stderr = x.stderr.join('');
    const results = x.results.map((r) => ({ ...(r.text !== undefined ? { text: cut(r.text) } : {}), formats: Object.keys(r).filter((k) => k !== 'isMainResult') }));
    const images = x.results.flatMap((r) => [
      ...(r.png ? [{ data: r.png, mimeType: 'image/png' }] : []),
      ...(!r.png && r.svg ? [{ data: Buffer.from(r.svg).toString('base64'), mimeType: 'image/svg+xml' }] : []),
    ]);
    const parts = [
      stdout && `--- stdout ---\n${cut(stdout)}`, stderr && `--- stderr ---\n${cut(stderr)}`,
      ...x.results.map((r) => (r.text !== undefined ? `${r.isMainResult ? 'value' : 'display'}: ${cut(r.text)}` : `${r.isMainResult ? 'value' : 'display'}: [${Object.keys(r).filter((k) => k !== 'isMainResult').join(', ')}]`)),
      x.error && `error: ${cut(x.error.traceback || `${x.error.name}: ${x.error.value}`)}`,
    ].filter(Boolean);
    return {
      text: parts.length ? parts.join('\n') : '(no output)',
      structured: { stdout: cut(stdout), stderr: cut(stderr), results, ...(x.error ? { error: x.error } : {}) },
      images,
    };
  }));

  server.registerTool('machine_fork', {
    title: 'Fork a machine',
    description: 'Makes copies of a running machine with the same memory, processes and disk at one instant (the source keeps running): '
      + 'try several approaches from one state. Returns the new machines\' ids.',
    inputSchema: { machine: machineId, count: z.number().int().min(1).max(8).optional() },
    outputSchema: { source: z.string(), machines: z.array(z.string()) },
  }, async (a) => guarded(async () => {
    const forks = (await sb.machines.get(a.machine).fork(a.count ?? 1)).map((f) => f.id);
    return { text: `forked ${a.machine} into ${forks.join(', ')}`, structured: { source: a.machine, machines: forks } };
  }));

  server.registerTool('delete_machine', {
    title: 'Delete a machine',
    description: 'Stops a machine and deletes it with its disk and memory (commit it into a context first to keep its files).',
    inputSchema: { machine: machineId, commitTo: z.string().min(1).max(128).optional().describe('Commit its changed files into this context first') },
    outputSchema: { machine: z.string(), committed: z.object({ context: z.string(), version: z.string() }).optional() },
  }, async (a) => guarded(async () => {
    const m = sb.machines.get(a.machine);
    const version = a.commitTo ? await m.commit(a.commitTo) : undefined;
    await m.remove();
    return {
      text: `deleted ${a.machine}${version ? ` after committing its changes to ${a.commitTo} as version ${version}` : ''}`,
      structured: { machine: a.machine, ...(version && a.commitTo ? { committed: { context: a.commitTo, version } } : {}) },
    };
  }));
}

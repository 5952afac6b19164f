import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { contextOf, tar, type Shellbase } from '@shellbase/sdk';
import { z } from 'zod';
import { cut, guarded } from './result.js';

/**
 * The build tool: a Dockerfile (given inline, with the files its COPY
 * steps read, or as a directory on this host) built into a context.
 */
export function registerBuildTools(server: McpServer, sb: Shellbase): void {
  server.registerTool('build_context', {
    title: 'Build a context from a Dockerfile',
    description: 'Builds a Dockerfile into a context (FROM debian, an image reference such as docker.io/library/python:3.12-slim, or context:NAME; RUN, COPY, ENV, WORKDIR, USER, …). '
      + 'Steps that did not change come from the cache, so building again after an edit is fast. Give the Dockerfile as text (with `files` for COPY), or `dir`, a directory on this host. '
      + 'The context then starts with the built files and the Dockerfile\'s ENV, WORKDIR and USER as its defaults; run commands in it with exec.',
    inputSchema: {
      tag: z.string().min(1).max(128).describe('The context to build (created, or its head moved to the build)'),
      dockerfile: z.string().optional().describe('The Dockerfile\'s text'),
      files: z.record(z.string(), z.string()).optional().describe('Files the Dockerfile\'s COPY steps read: relative path → text'),
      dir: z.string().optional().describe('Instead of dockerfile and files: a directory on this host holding a Dockerfile'),
      noCache: z.boolean().optional(),
    },
    outputSchema: {
      context: z.string(), version: z.string(),
      steps: z.array(z.object({ instruction: z.string(), cached: z.boolean(), ms: z.number() })),
      output: z.string().describe('What RUN steps printed (cut when long)'),
    },
  }, async (a) => guarded(async () => {
    if ((a.dir === undefined) === (a.dockerfile === undefined)) throw new Error('give either dockerfile (with files) or dir');
    const body = a.dir !== undefined ? contextOf(a.dir)
      : tar([{ path: 'Dockerfile', data: a.dockerfile! }, ...Object.entries(a.files ?? {}).map(([path, data]) => ({ path, data }))]);
    let output = '';
    const r = await sb.build({
      context: body, tag: a.tag, noCache: a.noCache,
      onEvent: (e) => { if ((e.type === 'stdout' || e.type === 'stderr') && output.length < 1 << 20) output += e.data; },
    });
    const cached = r.steps.filter((s) => s.cached).length;
    return {
      text: `built context ${r.context} at version ${r.version}: ${r.steps.length} steps, ${cached} from the cache\n`
        + r.steps.map((s) => `${s.cached ? 'CACHED' : `${s.ms} ms`.padStart(8)}  ${s.instruction}`).join('\n') + (output ? `\n--- output ---\n${cut(output)}` : ''),
      structured: { context: r.context, version: r.version, steps: r.steps.map((s) => ({ instruction: s.instruction, cached: s.cached, ms: s.ms })), output: cut(output) },
    };
  }));
}

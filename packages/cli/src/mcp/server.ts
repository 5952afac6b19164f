import { createServer, type IncomingMessage } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { Shellbase } from '@shellbase/sdk';
import { flag, numberFlag, type Command, type ParsedArgs } from '../args.js';
import { registerTools } from './tools.js';

const MAX_BODY = 4 << 20;
const MCP = 'shellbase mcp [--context NAME] [--http PORT]       MCP tools on stdio (or Streamable HTTP on 127.0.0.1:PORT/mcp)';

export const mcpCommand: Command = { name: 'mcp', spec: { usage: MCP, flags: { context: 'string', http: 'string' } }, run: mcp };

/**
 * `shellbase mcp [--context NAME] [--http PORT]`: shellbase's tools over the Model Context
 * Protocol, on stdio (the default) or Streamable HTTP on 127.0.0.1:PORT/mcp (stateless: each
 * request gets its own server), talking to a shellbase server through the SDK (SHELLBASE_URL,
 * SHELLBASE_API_KEY).
 */
async function mcp(args: ParsedArgs): Promise<number> {
  const pinned = flag(args, 'context');
  const sb = new Shellbase();
  const make = () => {
    const server = new McpServer({ name: 'shellbase', version: '0.1.0' }, {
      instructions: 'shellbase runs shell commands in sandboxes over named, versioned Debian file systems (contexts). '
        + 'Every command\'s file changes become a version; fork to try things apart, diff to compare, reset to go back.'
        + (pinned ? ` Every tool works on the context ${pinned}.` : ''),
    });
    registerTools(server, sb, pinned);
    return server;
  };
  const port = numberFlag(args, 'http', MCP);
  if (port === undefined) {
    const server = make();
    const closed = new Promise<number>((resolve) => { server.server.onclose = () => resolve(0); });
    await server.connect(new StdioServerTransport());
    return closed;
  }
  const http = createServer((req, res) => {
    void (async () => {
      if (req.url !== '/mcp') { res.writeHead(404).end(); return; }
      if (req.method !== 'POST') {
        res.writeHead(405, { 'content-type': 'application/json', allow: 'POST' })
          .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'stateless server: POST JSON-RPC messages to /mcp' }, id: null }));
        return;
      }
      const body = await readJson(req);
      const addr = http.address();
      const actual = typeof addr === 'object' && addr ? addr.port : port;
      const server = make();
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: undefined, enableDnsRebindingProtection: true, allowedHosts: [`127.0.0.1:${actual}`, `localhost:${actual}`],
      });
      res.on('close', () => { void transport.close(); void server.close(); });
      await server.connect(transport);
      await transport.handleRequest(req, res, body);
    })().catch((err: Error) => {
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32700, message: err.message }, id: null }));
    });
  });
  await new Promise<void>((resolve) => http.listen(port, '127.0.0.1', resolve));
  const addr = http.address();
  console.error(`shellbase mcp listening on http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : port}/mcp`);
  return new Promise<number>(() => undefined);
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY) throw new Error('request body too large');
    chunks.push(c as Buffer);
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { startTestServer, type TestServer } from './harness.ts';

const CLI = path.resolve('packages/cli/dist/main.js');
type Content = { content: { type: string; text: string }[]; isError?: boolean };
const textOf = (r: unknown) => (r as Content).content.map((c) => c.text).join('');

describe('MCP machine tools', { timeout: 600_000 }, () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('a machine keeps state between calls, forks with it, and commits its files on the way out', async () => {
    const client = new Client({ name: 'test', version: '1' });
    await client.connect(new StdioClientTransport({
      command: process.execPath, args: [CLI, 'mcp'], stderr: 'ignore',
      env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key } as Record<string, string>,
    }));
    try {
      const made = textOf(await client.callTool({ name: 'create_machine', arguments: {} }));
      const id = /machine (m_\w+) is running/.exec(made)?.[1];
      assert.ok(id, made);
      const call = async (name: string, args: Record<string, unknown>) => textOf(await client.callTool({ name, arguments: args }));
      await call('machine_exec', { machine: id, command: 'echo kept-in-memory > /dev/shm/state' });
      const fork = /into (m_\w+)/.exec(await call('machine_fork', { machine: id }))?.[1];
      assert.ok(fork);
      assert.match(await call('delete_machine', { machine: id }), /^deleted/);
      assert.match(await call('machine_exec', { machine: fork, command: 'cat /dev/shm/state' }), /exit code 0\n--- stdout ---\nkept-in-memory/);
      await call('machine_exec', { machine: fork, command: 'echo from-a-machine > /root/machine.txt' });
      // Long output: the start in the result, all of it in a file of the machine.
      const long = await call('machine_exec', { machine: fork, command: 'seq 1 20000' });
      const saved = /all of it is in (\/root\/\.mcp-output\/\d+\.txt)/.exec(long)?.[1];
      assert.ok(saved, long.slice(-300));
      assert.match(await call('machine_exec', { machine: fork, command: `grep -c . ${saved}; grep -x 20000 ${saved}` }), /--- stdout ---\n20002\n20000\n\n--- stderr ---/);
      assert.match(await call('delete_machine', { machine: fork, commitTo: 'agent' }), /after committing its changes to agent/);
      assert.match(await call('read_file', { context: 'agent', path: '/root/machine.txt' }), /from-a-machine/);
      const gone = await client.callTool({ name: 'machine_exec', arguments: { machine: fork, command: 'true' } });
      assert.equal((gone as Content).isError, true);
      assert.match(textOf(gone), /^not_found: /);
    } finally {
      await client.close();
    }
  });
});

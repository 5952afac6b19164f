import assert from 'node:assert/strict';
import { imageBuilt, imageInfo, loadConfig } from '@shellbase/server';
import { startTestServer, type TestServer } from './harness.ts';

/**
 * A test server for machines of the `code-interpreter` image, with E2B's SDKs pointed at it (their
 * environment variables). Fails at once, naming the command, when the set-up has not built the image.
 */
export async function codeInterpreterServer(): Promise<TestServer> {
  const { cache } = loadConfig({ cluster: null });
  assert.ok(imageBuilt(cache, 'code-interpreter'),
    `the code-interpreter image is not built at ${imageInfo(cache, 'code-interpreter').rootfs}: run scripts/setup (or \`shellbase image build code-interpreter\`)`);
  const t = await startTestServer();
  Object.assign(process.env, { E2B_API_URL: t.server.url, E2B_SANDBOX_URL: t.server.url, E2B_API_KEY: t.key, E2B_DOMAIN: 'e2b.test' });
  return t;
}

/** Ends what a test made: its sandboxes, then every machine left, then the server (failures included). */
export async function endCodeInterpreterServer(t: TestServer | undefined, made: { kill(): Promise<unknown> }[]): Promise<void> {
  for (const s of made) await s.kill().catch(() => undefined);
  try {
    for (const m of await t?.sb.machines.list() ?? []) await t!.sb.machines.get(m.id).remove();
  } finally {
    await t?.close();
  }
}

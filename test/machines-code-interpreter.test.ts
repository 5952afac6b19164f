import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Sandbox } from 'e2b';
import { codeInterpreterServer, endCodeInterpreterServer } from './code-interpreter-fixture.ts';
import type { TestServer } from './harness.ts';

// The `code-interpreter` image (E2B's code-interpreter-v1 template) in a machine under TCG, made
// through the unmodified `e2b` SDK. The image is built by the set-up (scripts/setup, step 7b:
// `shellbase image build code-interpreter`); nothing here reaches the internet. The first create
// builds the machine template: a boot, then the image's readiness check (its server answers once
// its default kernels run) before the memory is saved, so every sandbox has them running at once.
const PORT = '49999';
const SERVER = path.resolve('packages/server/templates/code-interpreter/server/ci_server/__main__.py');

describe('the code-interpreter template through the E2B SDK', { timeout: 900_000 }, () => {
  let t: TestServer;
  let sbx: Sandbox;
  const made: Sandbox[] = [];
  const create = async (template: string) => {
    // A newly built image's first machine boots its template first (over a minute under TCG), past the SDK's 60 s default.
    const s = await Sandbox.create(template, { timeoutMs: 600_000, requestTimeoutMs: 300_000 });
    made.push(s);
    return s;
  };
  /** A request to the sandbox's code interpreter as E2B's SDK sends it: the API's port, the sandbox and port in headers. */
  const interpreter = (s: Sandbox, p: string, init: RequestInit = {}) => fetch(`${t.server.url}${p}`, {
    ...init, headers: { 'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': PORT, 'Content-Type': 'application/json' },
  });

  before(async () => {
    t = await codeInterpreterServer();
    sbx = await create('code-interpreter-v1');
  });

  after(() => endCodeInterpreterServer(t, made));

  test('the sandbox is a machine of the code-interpreter image, and its interpreter answers /health at once', async () => {
    const m = await t.sb.machines.get(sbx.sandboxId).info();
    assert.deepEqual([m.state, m.image], ['running', 'code-interpreter']);
    assert.equal((await sbx.getInfo()).templateId, 'code-interpreter-v1');
    // No retry: the server and its kernels were running when the template's memory was saved.
    const health = await interpreter(sbx, '/health');
    assert.equal(health.status, 200, await health.text());
  });

  test('Python has the data libraries, R its kernel, Node.js and TypeScript are there', async () => {
    const r = await sbx.commands.run('python3 -c "import pandas, matplotlib, numpy, scipy, seaborn; print(pandas.__version__)"'
      + ' && python3 -c "from jupyter_client.kernelspec import find_kernel_specs as f; print(sorted(f()))"'
      + ' && node --version && tsc --version && systemctl is-active shellbase-code-interpreter', { timeoutMs: 120_000 });
    const [pandas, kernels, node, tsc, active] = r.stdout.trim().split('\n');
    assert.match(pandas, /^\d+\.\d+/);
    assert.equal(kernels, "['ir', 'python3']");
    assert.match(node, /^v\d+\./);
    assert.match(tsc, /^Version \d+\./);
    assert.equal(active, 'active');
  });

  test('POST /execute runs Python in the default kernel and streams its result', { skip: !existsSync(SERVER) && 'the interpreter server is not in this checkout' }, async () => {
    const res = await interpreter(sbx, '/execute', { method: 'POST', body: JSON.stringify({ code: '1+1' }) });
    assert.equal(res.status, 200);
    const lines = (await res.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { type: string; text?: string; is_main_result?: boolean });
    const result = lines.find((l) => l.type === 'result');
    assert.deepEqual([result?.text, result?.is_main_result], ['2', true], JSON.stringify(lines));
    assert.equal(lines.at(-1)?.type, 'end_of_execution');
  });

  test('`code-interpreter` names the same image (a restore of the same template): its interpreter answers at once too', async () => {
    const other = await create('code-interpreter');
    assert.equal((await t.sb.machines.get(other.sandboxId).info()).image, 'code-interpreter');
    assert.equal((await other.getInfo()).templateId, 'code-interpreter');
    assert.equal((await interpreter(other, '/health')).status, 200);
    await other.kill();
  });

  test('a machine made with shellbase\'s API: runCode as JSON; its interpreter\'s port wants the tenant\'s key on the gateway', async () => {
    const m = await t.sb.machines.create({ image: 'code-interpreter' });
    try {
      const r = await t.http('POST', `/v1/machines/${m.id}/code`, { body: { code: 'print("a"); 6 * 7' } });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(r.json.stdout, ['a\n']);
      assert.equal(r.json.results.find((x: { isMainResult: boolean }) => x.isMainResult)?.text, '42');
      const port = (await m.info()).ports.find((p) => p.port === Number(PORT));
      assert.equal(port?.access, 'key', 'the code route exposed the interpreter only to the tenant');
      // Two hours: under the wire's ceiling, above the tenant's maximum (one hour by default).
      const bad = await t.http('POST', `/v1/machines/${m.id}/code`, { body: { code: '1', timeoutMs: 7_200_000 } });
      assert.equal(bad.status, 400);
      assert.match(bad.json.error.message, /above this tenant's maximum/);
    } finally {
      await m.remove();
    }
  });
});

import { startTestServer } from '../test/harness.ts';
const t = await startTestServer({});
try {
  const r = await t.http('POST', '/v1/contexts/x/exec', { body: { command: `d=/fx; for i in $(seq 1 40); do d=$d/${'d'.repeat(120)}; done; mkdir -p $d && touch $d/deep; echo ok` } });
  console.log(r.status, r.text.slice(0, 300));
} finally { await t.close(); }

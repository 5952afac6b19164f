import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startTestServer } from '../../test/harness.ts';
import { httpClient, latency, pct, value, type Bench } from '../lib.ts';

const run = promisify(execFile);
const UPSTREAM = '127.0.0.2';

/**
 * Scenario 13: what egress costs. A query `true` with a `public` policy (an
 * egress session, the proxy's sockets and sbx-forward) against the same query
 * with `none` (no session at all); and a 100 MB download from an upstream on
 * 127.0.0.2 (python3's http.server in its own process) through the proxy,
 * against curl on the host from the same upstream.
 */
export async function egress(b: Bench): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-bench-egress-'));
  const size = b.quick ? 50 : 100;
  writeFileSync(path.join(dir, 'big'), Buffer.alloc(size * 1024 * 1024, 7));
  const upstream = spawn('python3', ['-m', 'http.server', '--bind', UPSTREAM, '--directory', dir, '0'], { stdio: ['ignore', 'pipe', 'ignore'] });
  const port = await new Promise<number>((resolve, reject) => {
    upstream.stdout!.on('data', (c: Buffer) => { const m = /port (\d+)/.exec(c.toString()); if (m) resolve(Number(m[1])); });
    upstream.once('exit', (code) => reject(new Error(`http.server exited ${code}`)));
  });
  const t = await startTestServer({
    storeSizeGb: 8,
    egress: { default: { egress: 'public' }, allowCidrs: [`${UPSTREAM}/32`], hosts: { 'big.example.test': UPSTREAM }, maxPerSandbox: 256, maxPerTenant: 1024, logDays: 7 },
  });
  try {
    const ctx = t.sb.context('egress');
    for (let w = 0; w < 20; w++) { await ctx.exec('true', { network: { egress: 'none' } }); await ctx.exec('true'); }
    const url = `${t.server.url}/v1/contexts/egress/exec`;
    const client = { ...b, t };
    b.baselines.set('query true, egress none', latency(b, 'query true, egress none (client in its own process)', await httpClient(client, url, { command: 'true', network: { egress: 'none' } })));
    latency(b, 'query true, egress public (client in its own process)', await httpClient(client, url, { command: 'true', network: { egress: 'public' } }), 'query true, egress none');

    const speeds = { host: [] as number[], sandbox: [] as number[] };
    const rounds = b.quick ? 3 : 5;
    for (let i = 0; i < rounds; i++) {
      const host = await run('curl', ['-s', '-o', '/dev/null', '-w', '%{speed_download}', `http://${UPSTREAM}:${port}/big`]);
      speeds.host.push(Number(host.stdout) / 1e6);
      const r = await ctx.exec(`curl -s -o /dev/null -w '%{speed_download}' http://big.example.test:${port}/big`, { commit: 'never' });
      if (r.exitCode !== 0) throw new Error(`download in a sandbox failed: ${r.stderr}`);
      speeds.sandbox.push(Number(r.stdout) / 1e6);
    }
    const hostMBs = pct(speeds.host, 50);
    const sandboxMBs = pct(speeds.sandbox, 50);
    value(b, `download ${size} MB with curl on the host (baseline)`, 'MB/s', hostMBs, 'MB/s', rounds);
    value(b, `download ${size} MB in a query through the egress proxy`, 'MB/s', sandboxMBs, 'MB/s', rounds);
    b.rows.push({ scenario: `download ${size} MB in a query through the egress proxy`, metric: 'ratio', value: Math.round((sandboxMBs / hostMBs) * 100) / 100, unit: '×', n: rounds, baseline: 'curl on the host' });
  } finally {
    await t.close();
    upstream.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

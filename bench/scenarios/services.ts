import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { SBX } from '../../packages/server/src/util/native.ts';
import { latency, time, type Bench } from '../lib.ts';

/** GET `path` (over TCP, or over a Unix socket) and wait for the whole answer; rejects if nothing answers. */
function get(opts: { port?: number; socketPath?: string; path: string; host?: string }): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: opts.port, socketPath: opts.socketPath, path: opts.path, agent: false,
      headers: opts.host ? { host: opts.host } : {} }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode ?? 0)); });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Scenario 10, services: a request to a sleeping `python3 -m http.server` until its answer,
 * against starting the same command under bare bwrap (host network) and polling its port; and
 * a warm request through the gateway against one straight to the service's bridge socket.
 */
export async function services(b: Bench, rootfs: string): Promise<void> {
  const { t } = b;
  const ctx = t.sb.context('bench-svc');
  const svc = await ctx.services.create({ name: 'http', command: 'python3 -m http.server 8000', port: 8000 });
  const gw = new URL(t.server.gatewayUrl);
  const viaGateway = () => get({ port: Number(gw.port), path: '/', host: new URL(svc.url).host });
  await viaGateway();
  const n = Math.ceil(b.n / 4);

  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-bench-svc-'));
  try {
    for (const d of ['up', 'work', 'merged']) mkdirSync(path.join(dir, d));
    let port = 20000 + (process.pid % 10000);
    const bare = await time(n, async () => {
      port++;
      const child = spawn(SBX, ['run', '--chdir', dir, '--lower', rootfs, '--upper', 'up', '--work', 'work', '--merged', 'merged', '--',
        'bwrap', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--die-with-parent', '--bind', path.join(dir, 'merged'), '/',
        '--proc', '/proc', '--dev', '/dev', '--chdir', '/root', '--', 'python3', '-m', 'http.server', String(port), '--bind', '127.0.0.1'], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr!.on('data', (c) => { stderr += String(c); });
      for (;;) {
        if (child.exitCode !== null) throw new Error(`the bare http.server baseline ended (${child.exitCode}): ${stderr.trim()}`);
        try { await get({ port, path: '/' }); break; } catch { await new Promise((r) => setTimeout(r, 5)); }
      }
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    });
    b.baselines.set('bare bwrap http.server', latency(b, 'baseline: bare bwrap python3 -m http.server, polled until it answers', bare));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const cold = await (async () => {
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      await ctx.services.stop('http');
      const t0 = performance.now();
      await viaGateway();
      out.push(performance.now() - t0);
    }
    return out;
  })();
  latency(b, 'request to a sleeping python3 http.server until its answer (gateway)', cold, 'bare bwrap http.server');

  await viaGateway();
  const socketPath = path.join(t.home, 'services', `${new URL(svc.url).hostname.split('.')[0]}.sock`);
  b.baselines.set('direct to the bridge', latency(b, 'warm request straight to the service bridge socket (baseline)', await time(b.n, () => get({ socketPath, path: '/' }))));
  latency(b, 'warm request through the gateway', await time(b.n, viaGateway), 'direct to the bridge');
  await ctx.services.stop('http');
}

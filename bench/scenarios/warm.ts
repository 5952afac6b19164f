import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Bash } from 'just-bash';
import { SBX } from '../../packages/server/src/util/native.ts';
import { startTestServer, type TestServer } from '../../test/harness.ts';
import { httpClient, latency, pct, value, type Bench } from '../lib.ts';

/**
 * Scenario 14: queries in sandboxes made ahead (the warm pool) against the same
 * queries started cold (a second server with `warm: false`) and a bare bwrap start, all in
 * rounds that alternate, so that the machine's drift hits each alike. Then parallel queries on
 * one context on both servers, the peer just-bash (in-process, simulated) against the same
 * command as a query, both against the physical floor (the same script by `bash -c` on the host,
 * fork+exec without isolation), the phases of a warm query, and what an idle pool holds.
 */
export async function warm(b: Bench, rootfs: string): Promise<void> {
  const cold = await startTestServer({ warm: false });
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-bench-warm-'));
  try {
    for (const d of ['up', 'work', 'merged']) mkdirSync(path.join(dir, d));
    const bare = () => {
      const t0 = performance.now();
      const r = spawnSync(SBX, ['run', '--chdir', dir, '--lower', rootfs, '--upper', 'up', '--work', 'work', '--merged', 'merged', '--',
        'bwrap', '--unshare-all', '--die-with-parent', '--bind', path.join(dir, 'merged'), '/', '--proc', '/proc', '--dev', '/dev', '--', '/bin/true']);
      if (r.status !== 0) throw new Error(`bare bwrap failed: ${String(r.stderr)}`);
      return performance.now() - t0;
    };
    // The physical floor: the same script by bash -c, fork+exec on the host without any isolation.
    const hostBash = (script: string) => () => {
      const t0 = performance.now();
      const r = spawnSync('bash', ['-c', script]);
      if (r.status !== 0) throw new Error(`bash -c failed: ${String(r.stderr)}`);
      return performance.now() - t0;
    };
    const peerCommand = 'echo hello > /tmp/x && cat /tmp/x';
    const bashTrue = hostBash('true');
    const bashPeer = hostBash(peerCommand.replaceAll('/tmp/x', path.join(dir, 'x')));
    for (const s of [b.t, cold]) for (let w = 0; w < 20; w++) await s.sb.context('warm').exec('true');
    const rounds = 5;
    const per = { ...b, n: Math.ceil(b.n / rounds) };
    const samples = { bare: [] as number[], warm: [] as number[], cold: [] as number[], warmArgv: [] as number[], bashTrue: [] as number[] };
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < per.n; i++) samples.bare.push(bare());
      for (let i = 0; i < per.n; i++) samples.bashTrue.push(bashTrue());
      samples.warm.push(...await httpClient(per, `${b.t.server.url}/v1/contexts/warm/exec`, { command: 'true' }));
      samples.warmArgv.push(...await httpClient(per, `${b.t.server.url}/v1/contexts/warm/exec`, { argv: ['true'] }));
      samples.cold.push(...await httpClient({ ...per, t: cold }, `${cold.server.url}/v1/contexts/warm/exec`, { command: 'true' }));
    }
    b.baselines.set('bare bwrap (this scenario)', pct(samples.bare, 50));
    latency(b, '14. bare bwrap true (alternating with the queries below)', samples.bare);
    latency(b, '14. query true via HTTP, warm pool', samples.warm, 'bare bwrap (this scenario)');
    latency(b, '14. query argv [true] via HTTP, warm pool', samples.warmArgv, 'bare bwrap (this scenario)');
    latency(b, '14. query true via HTTP, cold (SHELLBASE_WARM=0)', samples.cold, 'bare bwrap (this scenario)');
    value(b, '14. query true via HTTP, warm pool', 'p99/p50', pct(samples.warm, 99) / pct(samples.warm, 50), '×', samples.warm.length);
    latency(b, '14. baseline: bash -c true on the host (fork+exec, no isolation; alternating)', samples.bashTrue);
    value(b, '14. query true via HTTP, warm pool', 'p50/bash -c', pct(samples.warm, 50) / pct(samples.bashTrue, 50), '×', samples.warm.length);

    for (const c of [1, 2, 4, 8]) {
      for (const [name, s] of [['warm pool', b.t], ['cold', cold]] as [string, TestServer][]) {
        const ctx = s.sb.context('parallel');
        const total = b.quick ? 32 : 128;
        let next = 0;
        const lat: number[] = [];
        const started = performance.now();
        await Promise.all(Array.from({ length: c }, async () => {
          while (next++ < total) { const t0 = performance.now(); await ctx.exec(['true']); lat.push(performance.now() - t0); }
        }));
        value(b, `14. queries in parallel on one context, concurrency ${c}, ${name}`, 'throughput', total / ((performance.now() - started) / 1000), 'queries/s', total);
        value(b, `14. queries in parallel on one context, concurrency ${c}, ${name}`, 'p99', pct(lat, 99), 'ms', total);
      }
    }

    // The peer: just-bash, an in-process simulated bash (what agent builders route simple commands
    // to), against the same command as a query: the price of real isolation and real binaries.
    const fresh: number[] = [];
    const reused: number[] = [];
    const one = new Bash();
    for (let i = 0; i < b.n + 5; i++) {
      let t0 = performance.now();
      const r = await new Bash().exec(peerCommand);
      if (i >= 5) fresh.push(performance.now() - t0);
      t0 = performance.now();
      await one.exec(peerCommand);
      if (i >= 5) reused.push(performance.now() - t0);
      if (r.stdout !== 'hello\n') throw new Error(`just-bash said ${JSON.stringify(r)}`);
    }
    b.baselines.set('just-bash', pct(fresh, 50));
    latency(b, '14. peer: just-bash, a new Bash() per command', fresh);
    latency(b, '14. peer: just-bash, one Bash() for every command', reused);
    const asQuery = await httpClient(b, `${b.t.server.url}/v1/contexts/warm/exec`, { command: peerCommand });
    const onHost: number[] = [];
    for (let i = 0; i < b.n; i++) onHost.push(bashPeer());
    latency(b, '14. the same command as a query via HTTP, warm pool', asQuery, 'just-bash');
    latency(b, '14. baseline: the same command by bash -c on the host (fork+exec, no isolation)', onHost);
    value(b, '14. the same command as a query via HTTP, warm pool', 'p50/bash -c', pct(asQuery, 50) / pct(onHost, 50), '×', asQuery.length);

    // Phases of a warm query: the sandbox itself (take → exit, the result's wallMs) and the rest.
    const walls: number[] = [];
    for (let i = 0; i < b.n; i++) walls.push((await b.t.sb.context('warm').exec(['true'])).usage.wallMs);
    value(b, '14. phase: warm sandbox, job handed over → exit (result wallMs)', 'p50', pct(walls, 50), 'ms', walls.length);
    latency(b, '14. phase: GET /healthz via HTTP (the HTTP floor)', await httpClient({ ...b, n: b.n }, `${b.t.server.url}/healthz`));

    // What an idle pool holds once it shrank (the trim runs every 5 s): processes, their memory.
    await new Promise((r) => setTimeout(r, 11_000));
    const pids = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' }).split('\n')
      .filter((l) => l.includes(`--connect ${b.t.home}/warm/`)).map((l) => Number(l.trim().split(' ')[0]));
    // Proportional set size: shared pages (libc, the binary) counted once across processes.
    const pssKb = pids.reduce((sum, pid) => sum + Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0), 0);
    value(b, '14. idle pool (11 s without queries): processes', 'count', pids.length, '');
    value(b, '14. idle pool: proportional memory (PSS) of its processes', 'sum', pssKb / 1024, 'MiB');
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await cold.close();
  }
}

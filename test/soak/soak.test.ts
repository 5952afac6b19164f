import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { sleep, spawnServer } from '../harness.ts';

// The soak (not part of `npm test`; `npm run soak`, SHELLBASE_SOAK_MINUTES, default 10): a server
// in its own process under full concurrency (writes, reads, file calls, forks, merges, deletes,
// garbage collection) for that long. Its memory, descriptors and the host's mounts stay flat, and
// its event loop never stalls: collections run every 20 s over a retention of ~90 s, so history
// is dropped all along, as on a server that has run for months. The assertion is on the delays the
// server causes itself (shellbase_eventloop_stall_max_seconds); the raw delay, which also counts
// its thread waiting for a CPU that the 8 writers' sandboxes keep busy, is printed beside it.
const minutes = Number(process.env.SHELLBASE_SOAK_MINUTES ?? 10);
const home = mkdtempSync(path.join(tmpdir(), 'shellbase-soak-'));
let child: ChildProcess | null = null;
after(async () => {
  if (child && child.exitCode === null) { const done = new Promise((r) => child!.once('exit', r)); child.kill('SIGTERM'); await done; }
  rmSync(home, { recursive: true, force: true });
});

interface Sample { at: number; rssMb: number; heapMb: number; heapTotalMb: number; externalMb: number; anonMb: number; fds: number; mounts: number; lagMaxMs: number; stallMaxMs: number; versions: number }

const HEAP_LIMIT_MB = 128;

/** The host's mounts of this soak's data directory (other work on the host mounts and unmounts its own). */
const ownMounts = () => readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(home)).length;

/** The processes below `pid` (its sandboxes, helpers and their children), by name. */
function descendants(pid: number): string[] {
  const children = new Map<number, { ppid: number; comm: string }>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      children.set(Number(d), { comm: stat.slice(stat.indexOf('(') + 1, close), ppid: Number(stat.slice(close + 2).split(' ')[1]) });
    } catch { /* gone meanwhile */ }
  }
  const below = new Set([pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [p, c] of children) if (!below.has(p) && below.has(c.ppid)) { below.add(p); grew = true; }
  }
  below.delete(pid);
  return [...below].map((p) => children.get(p)!.comm);
}

test(`soak: ${minutes} minutes at full concurrency, flat memory, descriptors and mounts`, { timeout: (minutes + 5) * 60_000 }, async () => {
  // A small old space: a leak would run the server out of heap (it would die, and every later
  // operation fail) well within the soak; without one, collections keep it under the limit.
  const s = await spawnServer(home, {
    env: {
      NODE_OPTIONS: `--max-old-space-size=${HEAP_LIMIT_MB}`,
      SHELLBASE_GC_INTERVAL_MS: '20000', SHELLBASE_RETENTION_DAYS: '0.001', SHELLBASE_KEEP_VERSIONS: '5',
    },
  });
  child = s.child;
  const { sb } = s;
  const pid = s.child.pid!;
  const metricMb = (text: string, name: string) => Math.round(Number(new RegExp(`^shellbase_${name} (\\S+)$`, 'm').exec(text)?.[1]) / 1e6);
  const kbMb = (text: string, key: string) => Math.round(Number(new RegExp(`${key}:\\s+(\\d+)`).exec(text)?.[1]) / 1024);
  let versions = 0;
  const sample = async (): Promise<Sample> => {
    const metrics = await (await fetch(`${sb.url}/metrics`)).text();
    // The worst event-loop delay since the previous scrape (prom-client resets it on each).
    const lag = Number(/^shellbase_nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(metrics)?.[1] ?? NaN);
    // The part of it the server caused itself (not its thread waiting for a CPU the sandboxes and
    // this test's own client keep busy on a small host).
    const stall = Number(/^shellbase_eventloop_stall_max_seconds (\S+)$/m.exec(metrics)?.[1] ?? NaN);
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return {
      at: Math.round(performance.now() / 1000),
      heapMb: metricMb(metrics, 'nodejs_heap_size_used_bytes'),
      heapTotalMb: metricMb(metrics, 'nodejs_heap_size_total_bytes'),
      // Buffers and native objects V8 knows of, and anonymous memory (heap, V8, malloc) as the kernel counts it.
      externalMb: metricMb(metrics, 'nodejs_external_memory_bytes'),
      anonMb: kbMb(status, 'RssAnon'),
      rssMb: kbMb(status, 'VmRSS'),
      fds: readdirSync(`/proc/${pid}/fd`).length,
      mounts: ownMounts(),
      lagMaxMs: Math.round(lag * 1000),
      stallMaxMs: Math.round(stall * 1000),
      versions,
    };
  };
  const end = performance.now() + minutes * 60_000;
  const errors: string[] = [];
  let ops = 0;
  const workers = Array.from({ length: 8 }, async (_, w) => {
    for (let k = 0; performance.now() < end; k++) {
      const name = `soak-${w}`;
      try {
        await sb.context(name).exec(`echo ${k} > /root/f-${k % 50}; cat /root/f-* > /dev/null; head -c 64k /dev/urandom > /tmp/x`);
        versions++;
        await sb.context(name).files.write(`/root/w-${k % 20}`, String(k));
        await sb.context(name).files.read(`/root/w-${k % 20}`);
        if (k % 10 === 0) {
          const fork = await sb.context(name).fork(`${name}-f${k}`);
          await fork.exec(`echo ${k} > /root/m-${k}`);
          await sb.context(name).merge(`${name}-f${k}`);
          await fork.delete();
        }
        if (w === 0 && k % 25 === 0) await sb.gc();
        ops++;
      } catch (e) {
        errors.push(String(e));
      }
    }
  });
  const samples: Sample[] = [];
  const sampler = (async () => {
    while (performance.now() < end) { samples.push(await sample()); await sleep(15_000); }
  })();
  await Promise.all([...workers, sampler]);
  samples.push(await sample());
  console.log(JSON.stringify({ ops, errors: errors.length, samples }, null, 1));
  assert.deepEqual(errors.slice(0, 5), [], 'no operation failed');
  // Flat, after the first minute's warm-up: the server lived through it within its heap limit
  // (the heap is sampled between collections, a sawtooth below the limit), and its resident
  // memory (heap, V8's reserve, malloc's arenas) stays within a bound that a leak would cross.
  assert.equal(s.child.exitCode, null, 'the server is alive');
  const warm = samples.filter((x) => x.at - samples[0].at >= 60);
  const base = warm[0] ?? samples[0];
  const last = samples[samples.length - 1];
  assert.ok(Math.max(...samples.map((x) => x.heapMb)) <= HEAP_LIMIT_MB + 32, 'the heap stayed within its limit');
  assert.ok(last.rssMb <= base.rssMb + HEAP_LIMIT_MB, `resident memory ${base.rssMb} -> ${last.rssMb} MB`);
  assert.ok(last.fds <= base.fds + 20, `descriptors ${base.fds} -> ${last.fds}`);
  assert.ok(last.mounts <= base.mounts, `mounts ${base.mounts} -> ${last.mounts}`);
  // Level after warm-up: the last quarter's resident memory no higher than the second quarter's, give or take 40 MB.
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
  const q = Math.floor(warm.length / 4);
  if (q >= 2) {
    const early = median(warm.slice(q, 2 * q).map((x) => x.rssMb));
    const late = median(warm.slice(-q).map((x) => x.rssMb));
    assert.ok(late <= early + 40, `resident memory level: ${early} -> ${late} MB`);
  }
  const worstLag = Math.max(...warm.map((x) => x.lagMaxMs));
  assert.ok(warm.every((x) => Number.isFinite(x.stallMaxMs)), 'the server reports shellbase_eventloop_stall_max_seconds');
  const worstStall = Math.max(...warm.map((x) => x.stallMaxMs));
  console.log(JSON.stringify({ worstEventLoopDelayMs: worstLag, worstStallMs: worstStall, versionsMade: versions, loadAverage: loadavg() }));
  assert.ok(worstStall < 100, `the event loop's worst stall (the server's own doing) while collections ran: ${worstStall} ms`);
  const sandboxes = descendants(pid).filter((c) => c === 'bwrap').length;
  assert.ok(sandboxes <= 8, `no sandboxes pile up (${sandboxes} bwrap processes below the server)`);
});

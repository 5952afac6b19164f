// bin/node --import tsx bench/cluster.ts [--quick]: cluster mode on this one host (docs/performance.md,
// Cluster mode). A worker over Postgres and the S3 API of test/s3.ts against the embedded
// server; fresh workers for the first query on a context they have never seen. Figures
// are printed (ratios against the embedded server where a goal is set against it); nothing is
// asserted. Postgres counts statements with pg_stat_statements: each is one round trip. The
// embedded server and the warm worker take turns query by query; the cold first query is run on
// several fresh workers, and the p50 of each figure over them is reported (a single query is
// too noisy here to put against a p50), with the p50 of the n queries after it on the first.
import { startTestServer } from '../test/harness.ts';
import { PREFIX, startCluster } from '../test/cluster-harness.ts';
import type { Shellbase } from '@shellbase/sdk';

const quick = process.argv.includes('--quick');
/** `--trips`: only the warm query and the round trips (no cold worker). */
class Done extends Error {}
const n = quick ? 15 : 60;
const MB = quick ? 50 : 200;
/** Cold runs: fresh workers, one after another, for the first query on a context and on its fork. */
const reps = quick ? 2 : 5;

const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
async function timeIt(f: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await f();
  return performance.now() - t0;
}
/** The p50 of `n` read-only queries on each server, the servers taking turns. */
async function alternateP50(servers: Shellbase[], context: string, command: string): Promise<number[]> {
  for (const sb of servers) await sb.context(context).exec(command, { commit: 'never' }); // warm
  const times = servers.map((): number[] => []);
  for (let i = 0; i < n; i++) {
    for (const [k, sb] of servers.entries()) times[k].push(await timeIt(() => sb.context(context).exec(command, { commit: 'never' })));
  }
  return times.map(p50);
}

/** The worker's count of its requests' round trips to Postgres (shellbase_metadata_round_trips_total). */
async function roundTrips(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = /^shellbase_metadata_round_trips_total\{work="request"\} (\d+)/m.exec(text);
  if (!m) throw new Error('the worker serves no shellbase_metadata_round_trips_total');
  return Number(m[1]);
}

const rows: [string, string][] = [];
const cluster = await startCluster({ postgresSettings: ['shared_preload_libraries=pg_stat_statements', 'pg_stat_statements.track=top'] });
let embedded: Awaited<ReturnType<typeof startTestServer>> | null = null;
const closeEmbedded = async () => { const e = embedded; embedded = null; await e?.close(); };
try {
  embedded = await startTestServer();
  await cluster.sql('CREATE EXTENSION pg_stat_statements');
  // Heartbeats every minute: the statements counted below are the requests'.
  const a = await cluster.start('a', { SHELLBASE_HEARTBEAT_MS: '60000' });
  // The embedded server and the warm worker answer in turns, query by query: a drift of this
  // VM's speed during the run falls on both alike. The embedded server then goes.
  const [embeddedTrue, clusterTrue] = await alternateP50([embedded.sb, a.sb], 'warm', 'true');
  await closeEmbedded();
  rows.push(['query `true` p50, embedded', `${embeddedTrue.toFixed(1)} ms`]);
  rows.push(['query `true` p50, cluster worker (warm)', `${clusterTrue.toFixed(1)} ms (${(clusterTrue / embeddedTrue).toFixed(2)}× embedded)`]);

  // Round trips as the worker counts them (GET /metrics), background work apart; Postgres's own
  // count of statements (pg_stat_statements, top level) beside it.
  const trips = async () => roundTrips(a.url);
  const statements = async () => Number((await cluster.sql<{ n: string }>(`SELECT COALESCE(SUM(calls), 0) AS n FROM pg_stat_statements
    WHERE query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%cluster_workers%' AND query NOT LIKE '%cluster_pins%'`))[0].n);
  if (process.argv.includes('--statements')) await cluster.sql('SELECT pg_stat_statements_reset()');
  let before = await statements();
  let tripsBefore = await trips();
  for (let i = 0; i < 20; i++) await a.sb.context('warm').exec('true', { commit: 'never' });
  const perRead = ((await statements()) - before) / 20;
  const tripsPerRead = ((await trips()) - tripsBefore) / 20;
  if (process.argv.includes('--statements')) {
    // Which statements a read-only query costs (20 queries: calls / 20 each).
    for (const r of await cluster.sql<{ calls: string; query: string }>('SELECT calls, query FROM pg_stat_statements ORDER BY calls DESC LIMIT 25')) {
      console.log(`${(Number(r.calls) / 20).toFixed(1)}  ${r.query.replace(/\s+/g, ' ').slice(0, 150)}`);
    }
  }
  before = await statements();
  tripsBefore = await trips();
  for (let i = 0; i < 20; i++) await a.sb.context('warm').exec(`echo ${i} > /root/f${i}`);
  const perCommit = ((await statements()) - before) / 20;
  const tripsPerCommit = ((await trips()) - tripsBefore) / 20;
  rows.push(['metadata round trips per read-only query (worker\'s count; Postgres\'s statements)', `${tripsPerRead.toFixed(1)} (${perRead.toFixed(1)})`]);
  rows.push(['metadata round trips per committing query (worker\'s count; Postgres\'s statements)', `${tripsPerCommit.toFixed(1)} (${perCommit.toFixed(1)})`]);

  if (process.argv.includes('--trips')) throw new Done();
  // A context of MB MiB (half incompressible, half text) in four layers, made on worker A.
  for (let i = 0; i < 4; i++) {
    await a.sb.context('big').exec(`head -c ${(MB / 8) << 20} /dev/urandom > /root/r${i} && seq 1 ${(MB / 8) * 150_000} | head -c ${(MB / 8) << 20} > /root/t${i}`,
      { limits: { diskMb: MB * 2 }, timeoutMs: 600_000 });
  }
  // The object store's floor: the context's blobs downloaded (all at once) by this process and
  // thrown away, against which a cold worker's first query (download, unpack, mount, run) is put.
  const blobs = await cluster.sql<{ digest: string; size: string }>(`SELECT DISTINCT b.digest, b.size FROM contexts c JOIN versions v ON v.id = c.head
    JOIN cluster_layer_blobs b ON position(b.layer_id IN v.layers) > 0 WHERE c.name = 'big'`);
  const store = cluster.s3.store({ prefix: PREFIX });
  const download = async () => timeIt(() => Promise.all(blobs.map(async ({ digest }) => { for await (const _ of await store.get(digest)) { /* drained */ } })));
  await download();
  const floor = await download();
  const packed = blobs.reduce((n, b) => n + Number(b.size), 0);
  // Each cold run is a fresh worker that runs three queries of its own first (on a small context):
  // what follows is the big context's cost, not that of the worker's first queries ever (its
  // first Postgres connections, their first statements). Then the first
  // query on the big context (its layers fetched), the single query right after it, and (first
  // run only) the p50 of n more. The worker is stopped before the next run.
  // SHELLBASE_BENCH_TRACE=1: the first run's worker logs at debug level, and its lines about the fetch are printed.
  const trace = process.env.SHELLBASE_BENCH_TRACE === '1';
  const coldRuns = async (name: string, context: string) => {
    const firsts: number[] = [];
    const seconds: number[] = [];
    let after = 0;
    for (let k = 0; k < reps; k++) {
      const w = await cluster.start(`${name}${k}`, { SHELLBASE_HEARTBEAT_MS: '60000', ...(trace && k === 0 ? { SHELLBASE_LOG_LEVEL: 'debug' } : {}) });
      for (let i = 0; i < 3; i++) await w.sb.context(`own-${name}${k}`).exec('true', { commit: 'never' });
      firsts.push(await timeIt(() => w.sb.context(context).exec('true', { commit: 'never' })));
      seconds.push(await timeIt(() => w.sb.context(context).exec('true', { commit: 'never' })));
      if (k === 0) [after] = await alternateP50([w.sb], context, 'true');
      if (trace && k === 0) for (const line of w.log().split('\n').filter((l) => /layer fetched|request completed|incoming request/.test(l)).slice(-16)) console.log(line.slice(0, 300));
      w.child.kill('SIGTERM');
      await new Promise((r) => w.child.once('exit', r));
    }
    return { firsts, seconds, after };
  };
  const cold = await coldRuns('b', 'big');
  await a.sb.context('big').fork('big-fork');
  const forked = await coldRuns('c', 'big-fork');
  const each = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(', ');
  rows.push([`downloading its ${blobs.length} blobs (${(packed / 2 ** 20).toFixed(0)} MiB packed) from the object store, nothing else`, `${floor.toFixed(0)} ms`]);
  for (const [what, r] of [[`a worker that never saw a ${MB} MiB context (4 layers fetched)`, cold], ['its fork, on a worker that never saw either', forked]] as const) {
    rows.push([`first query on ${what}, p50 of ${reps} workers`, `${p50(r.firsts).toFixed(0)} ms (${(p50(r.firsts) / floor).toFixed(2)}× the download; each: ${each(r.firsts)})`]);
    rows.push(['  the single query right after it, p50', `${p50(r.seconds).toFixed(0)} ms (${(p50(r.seconds) / clusterTrue).toFixed(2)}× a warm \`true\`; each: ${each(r.seconds)})`]);
    rows.push([`  the ${n} after that on the first worker, p50`, `${r.after.toFixed(1)} ms (${(r.after / clusterTrue).toFixed(2)}× a warm \`true\`)`]);
  }
} catch (e) {
  if (!(e instanceof Done)) throw e;
} finally {
  await closeEmbedded();
  await cluster.stop();
}
const width = Math.max(...rows.map(([k]) => k.length));
for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startCluster, type ClusterWorkerProcess as Worker, type TestCluster } from './cluster-harness.ts';
import { sleep } from './harness.ts';
import { startTcpSwitch, type TcpSwitch } from './tcp-switch.ts';

// Faults of what a cluster stands on, with real processes: Postgres restarted under load, and the
// object store gone from the network (a relay in front of the S3 API, switched off). Requests fail
// with 503 `unavailable` meanwhile and work again afterwards, with no worker restarted.
let cluster: TestCluster;
let s3: TcpSwitch;
let w: Worker;

const codeOf = (e: unknown) => (e as { code?: string }).code ?? String(e);
const alive = (x: Worker) => x.child.exitCode === null && x.child.signalCode === null;

before(async () => {
  cluster = await startCluster();
  s3 = await startTcpSwitch(cluster.s3.endpoint);
  w = await cluster.start('a', { SHELLBASE_S3_ENDPOINT: s3.url });
  await w.sb.context('faults').exec('echo kept > /root/kept');
});

after(async () => {
  s3?.on();
  await cluster?.stop();
  await s3?.close();
});

test('faults: Postgres restarted under load: requests fail with 503 unavailable meanwhile and recover by themselves', async () => {
  const outcomes: string[] = [];
  let running = true;
  const load = Array.from({ length: 4 }, async (_, i) => {
    while (running) {
      try {
        const r = await w.sb.context('faults').exec(i % 2 ? 'cat /root/kept' : `echo ${i} > /root/load-${i}`, i % 2 ? { commit: 'never' } : {});
        outcomes.push(r.exitCode === 0 ? 'ok' : `exit ${r.exitCode}`);
      } catch (e) {
        outcomes.push(codeOf(e));
        await sleep(20);
      }
    }
  });
  try {
    await restartUnderLoad(outcomes);
  } finally {
    running = false;
    await Promise.all(load);
  }
  assert.ok(alive(w), 'the worker was not restarted');
  const kinds = new Set(outcomes);
  assert.ok(kinds.has('unavailable'), 'requests during the restart failed');
  assert.deepEqual([...kinds].filter((k) => k !== 'ok' && k !== 'unavailable'), [], `only 503 unavailable, never another error: ${[...kinds].join(', ')}`);
  const r = await w.sb.context('faults').exec('echo after > /root/after');
  assert.ok(r.committed, 'writes commit again');
});

/** Restarts Postgres while `outcomes` grows; returns once requests work again and eight more went through. */
async function restartUnderLoad(outcomes: string[]): Promise<void> {
  while (!outcomes.includes('ok')) await sleep(20);
  await cluster.postgres.restart(async () => {
    // While it is down: a clear 503, not a 500 or a hang.
    await assert.rejects(w.sb.context('faults').exec('true'), (e: Error & { code?: string; status?: number }) => e.code === 'unavailable' && e.status === 503 && /metadata database/.test(e.message));
    const failed = outcomes.length;
    while (outcomes.length < failed + 4) await sleep(20);
  });
  // Back: the same worker process serves again, without a restart.
  for (;;) {
    try {
      await w.sb.context('faults').exec('true');
      break;
    } catch (e) {
      assert.equal(codeOf(e), 'unavailable');
      await sleep(100);
    }
  }
  const from = outcomes.length;
  while (outcomes.slice(from).filter((o) => o === 'ok').length < 8) {
    assert.ok(alive(w), 'the worker is still running');
    await sleep(20);
  }
  assert.ok(outcomes.slice(from).every((o) => o === 'ok'), `every request after recovery works: ${outcomes.slice(from).join(', ')}`);
}

test('faults: the object store unreachable: writes fail with 503 and commit nothing, reads from the local cache go on', async () => {
  const ctx = w.sb.context('faults');
  const head = (await ctx.info()).head;
  s3.off();
  try {
    await assert.rejects(ctx.exec('echo lost > /root/lost'), (e: Error & { code?: string; status?: number }) => e.code === 'unavailable' && e.status === 503 && /object store/.test(e.message));
    assert.equal((await ctx.info()).head, head, 'nothing was committed');
    const read = await ctx.exec('cat /root/kept /root/after', { commit: 'never' });
    assert.equal(read.stdout, 'kept\nafter\n', 'a query reads the layers this worker has');
    assert.equal(Buffer.from(await ctx.files.read('/root/kept')).toString(), 'kept\n', 'and so does the files API');
    assert.deepEqual((await ctx.files.list('/root')).map((e) => e.name).filter((n) => n === 'lost'), []);
  } finally {
    s3.on();
  }
  const r = await ctx.exec('echo back > /root/back');
  assert.ok(r.committed, 'writes work again once it is back');
  assert.ok(alive(w));
});

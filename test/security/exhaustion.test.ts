import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Shellbase } from '@shellbase/sdk';
import { after, before, describe, test } from 'node:test';
import { sleep, startTestServer, type TestServer } from '../harness.ts';

// Threat: a query exhausts what the host shares (cpu time, processes, memory, disk, inodes, file
// descriptors, the server's memory through output). Defence: each meets its own limit with a clear
// result (docs/security.md), and every other query carries on. The latency other tenants see while
// it happens is measured by the bench suite (scenario "noisy neighbours"), not asserted here.
describe('security: resource exhaustion is contained', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  const stillServing = async () => {
    const r = await t.sb.context('bystander').exec('echo fine');
    assert.equal(r.stdout, 'fine\n');
  };

  const sandboxProcesses = () => {
    const out = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
    return out.split('\n').filter((l) => l.includes('sleep 7777') && !l.includes('ps -eo'));
  };

  test('a timeout kills the whole process tree', async () => {
    const r = await t.sb.context('slow').exec('(sleep 7777 &) ; sleep 7777 & echo started; wait', { timeoutMs: 1000 });
    assert.equal(r.timedOut, true);
    assert.equal(r.signal, 'SIGKILL');
    assert.equal(r.exitCode, 137);
    assert.equal(r.stdout, 'started\n');
    assert.ok(r.usage.wallMs >= 1000 && r.usage.wallMs < 10_000, `wall ${r.usage.wallMs}`);
    assert.deepEqual(sandboxProcesses(), [], 'no process of the query survives');
    await stillServing();
  });

  test('a fork bomb meets the pids limit', async () => {
    // Whether bash's own fork retries outlast the timeout depends on timing; either way the
    // bomb must have hit the limit and left nothing behind.
    const r = await t.sb.context('bomb').exec('bomb() { bomb | bomb & }; bomb; sleep 1; echo survived',
      { timeoutMs: 8_000, limits: { pids: 64 } });
    assert.match(r.stderr, /fork: (retry: )?Resource temporarily unavailable/);
    assert.ok(r.timedOut || r.stdout === 'survived\n', JSON.stringify({ ...r, stderr: r.stderr.slice(0, 200) }));
    const ps = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
    assert.ok(!ps.includes('bomb'), 'no process of the bomb survives');
    await stillServing();
  });

  test('a memory bomb is OOM-killed and reported', async () => {
    const r = await t.sb.context('mem').exec('python3 -c "x = bytearray(512 * 1024 * 1024); print(len(x))"',
      { limits: { memoryMb: 64 } });
    assert.equal(r.oomKilled, true);
    assert.notEqual(r.exitCode, 0);
    assert.equal(r.stdout, '');
    assert.ok(r.usage.memoryPeakBytes <= 64 * 1024 * 1024 + 4096, `peak ${r.usage.memoryPeakBytes}`);
    await stillServing();
  });

  test('256 MiB of output is cut at the cap while the server memory stays flat', async () => {
    const rssBefore = process.memoryUsage().rss;
    const r = await t.sb.context('flood').exec('head -c 256M /dev/zero | tr "\\0" x; echo done >&2', { timeoutMs: 120_000 });
    assert.equal(r.truncated, true);
    assert.equal(r.stdout.length, 1 << 20);
    assert.equal(r.stderr, 'done\n', 'the command ran to its end');
    const grown = process.memoryUsage().rss - rssBefore;
    assert.ok(grown < 100 * 1024 * 1024, `server grew by ${grown} bytes`);
    const small = await t.sb.context('flood').exec('seq 1 100000', { limits: { outputBytes: 10 } });
    assert.equal(small.stdout, '1\n2\n3\n4\n5\n');
    assert.equal(small.truncated, true);
  });

  test('disk fill meets limits.diskMb instead of filling the host', async () => {
    const r = await t.sb.context('fill').exec('head -c 3G /dev/zero > /big; echo rc=$?', { limits: { diskMb: 64 }, commit: 'on-success' });
    assert.match(r.stderr, /Disk quota exceeded/);
    assert.equal(r.diskLimitHit, true);
    assert.ok(r.usage.bytesWritten <= 80 * 1024 * 1024, `wrote ${r.usage.bytesWritten}`);
    assert.equal(r.stdout, 'rc=1\n');
    await stillServing();
    const again = await t.sb.context('fill').exec('head -c 10M /dev/zero > /ok && echo ok', { limits: { diskMb: 64 } });
    assert.equal(again.stdout, 'ok\n', 'the next query of the context has its own quota');
    assert.equal(again.committed, true);
  });

  test('inode exhaustion (empty files until it fails) meets the disk limit too', async () => {
    const script = 'import os\nn = 0\ntry:\n    while True:\n        os.mknod(f"/root/f{n}")\n        n += 1\nexcept OSError as e:\n    print(n > 1000, e.strerror)';
    const r = await t.sb.context('inodes').exec(['python3', '-c', script], { limits: { diskMb: 8 }, commit: 'never', timeoutMs: 120_000 });
    assert.equal(r.stdout, 'True Disk quota exceeded\n', r.stderr);
    await stillServing();
  });

  test("a tenant's many sandboxes share one sandbox's CPU weight and the tenant's cores, so they cannot crowd out another's", async () => {
    const key = (await t.http('POST', '/v1/tenants', { body: { name: 'crowd' } })).json.apiKey;
    const crowd = new Shellbase({ url: t.server.url, apiKey: key });
    const running = [...Array.from({ length: 4 }, (_, i) => crowd.context(`c${i}`).exec('sleep 1.5', { commit: 'never' })),
      t.sb.context('alone').exec('sleep 1.5', { commit: 'never' })];
    await sleep(700);
    const instance = createHash('sha256').update(t.home).digest('hex').slice(0, 12);
    const v1 = existsSync('/sys/fs/cgroup/cpu/shellbase');
    const dir = v1 ? `/sys/fs/cgroup/cpu/shellbase/${instance}` : `/sys/fs/cgroup/shellbase/${instance}`;
    const busy = readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory())
      .filter((e) => readFileSync(path.join(dir, e.name, 'cgroup.procs'), 'utf8').trim() !== '');
    const read = (e: { name: string }, f: string) => readFileSync(path.join(dir, e.name, f), 'utf8').trim();
    const weights = busy.map((e) => Number(read(e, v1 ? 'cpu.shares' : 'cpu.weight'))).sort((a, b) => a - b);
    assert.deepEqual(weights, v1 ? [256, 256, 256, 256, 1024] : [25, 25, 25, 25, 100]);
    // Caps in µs per 100 ms: each of the four gets a quarter of the tenant's cores (below its own 1 core).
    const quarter = Math.round(Math.min(1, t.config.quotas.tenantCpus / 4) * 100000);
    const alone = Math.round(Math.min(1, t.config.quotas.tenantCpus) * 100000);
    const caps = busy.map((e) => Number((v1 ? read(e, 'cpu.cfs_quota_us') : read(e, 'cpu.max').split(' ')[0]))).sort((a, b) => a - b);
    assert.deepEqual(caps, [quarter, quarter, quarter, quarter, alone]);
    await Promise.all(running);
  });

  test('thousands of open files meet the per-process cap', async () => {
    const script = 'fs = []\ntry:\n    while True:\n        fs.append(open("/dev/null"))\nexcept OSError as e:\n    print(len(fs) > 4000, len(fs) < 4096, e.strerror)';
    const r = await t.sb.context('files').exec(['python3', '-c', script]);
    assert.equal(r.stdout, 'True True Too many open files\n', r.stderr);
    await stillServing();
  });
});

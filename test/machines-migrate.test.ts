import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { Shellbase } from '@shellbase/sdk';
import { PREFIX, startCluster, type TestCluster } from './cluster-harness.ts';
import { spawnServer, stopServer } from './harness.ts';

const run = promisify(execFile);
const CLI = path.resolve('packages/cli/dist/main.js');

// Machines under TCG: one VM at a time here.
describe('machines migrated into a cluster', { timeout: 900_000 }, () => {
  let cluster: TestCluster;
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-migrate-machines-'));
  chmodSync(dir, 0o711);
  const home = path.join(dir, 'embedded');
  before(async () => { cluster = await startCluster(); });
  after(async () => {
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a hibernated machine wakes on a worker with its memory; a snapshot restores there', async () => {
    const { child, sb } = await spawnServer(home);
    let hibernated = '';
    let snapshot = '';
    let stopped = '';
    try {
      const s = await sb.machines.create();
      await s.stop();
      stopped = s.id;
      const m = await sb.machines.create();
      await m.exec('echo in-memory > /dev/shm/mem && echo on-disk > /root/kept');
      snapshot = await m.snapshot();
      await m.hibernate();
      hibernated = m.id;
    } finally {
      await stopServer(child);
    }
    const r = await run(process.execPath, [CLI, 'migrate', '--metadata', cluster.database, '--blobs', `s3://${cluster.s3.bucket}/${PREFIX}`, '--s3-endpoint', cluster.s3.endpoint], {
      env: { ...process.env, SHELLBASE_HOME: home, SHELLBASE_STORE_SIZE_GB: '16', AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test', AWS_REGION: 'us-east-1' },
    });
    assert.match(r.stderr, /1 hibernated machines and 1 snapshots/);
    assert.match(r.stderr, new RegExp(`left behind: ${stopped} \\(stopped\\)`));
    const w = path.join(dir, 'w1');
    mkdirSync(w, { mode: 0o711 });
    copyFileSync(path.join(home, 'admin.key'), path.join(w, 'admin.key'));
    const worker = await cluster.start('w1', {}, w);
    const admin = new Shellbase({ url: worker.url, apiKey: readFileSync(path.join(home, 'admin.key'), 'utf8').trim() });
    assert.deepEqual((await admin.machines.list()).map((x) => x.id), [hibernated], 'the stopped machine stayed behind');
    const m = admin.machines.get(hibernated);
    assert.equal((await m.info()).state, 'hibernated');
    assert.equal((await m.exec('cat /dev/shm/mem /root/kept')).stdout, 'in-memory\non-disk\n', 'its memory and its disk, fetched from the object store');
    await m.remove();
    const [copy] = await admin.machines.restore(snapshot, 1);
    assert.equal((await copy.exec('cat /dev/shm/mem')).stdout, 'in-memory\n');
    await copy.remove();
    await admin.machines.deleteSnapshot(snapshot);
  });
});

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { Shellbase, type MachineHandle } from '@shellbase/sdk';
import { loadConfig, restoreServer, startServer, type BackupManifest } from '@shellbase/server';
import { qemuProcesses, sleep, startTestServer, type TestServer } from './harness.ts';

// Machines under TCG: at most two VMs run at once.
const COUNTER = "setsid -f sh -c 'i=0; while true; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done' >/dev/null 2>&1";
const counter = async (m: MachineHandle) => Number((await m.exec('cat /run/counter')).stdout.trim());

describe('machines in a server backup', { timeout: 900_000 }, () => {
  let t: TestServer;
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-machine-backups-'));
  before(async () => { t = await startTestServer(); });
  after(async () => {
    for (const m of await t.sb.machines.list().catch(() => [])) await t.sb.machines.get(m.id).remove().catch(() => undefined);
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a hibernated machine wakes on the restored server with its processes and files; a snapshot restores; a running one is named and left out', async () => {
    const hib = await t.sb.machines.create();
    await hib.exec(`echo on-disk > /root/kept && echo in-memory > /dev/shm/mem && ${COUNTER}`);
    await sleep(500);
    const before = await counter(hib);
    await hib.hibernate();
    const src = await t.sb.machines.create();
    await src.exec('echo at-snapshot > /dev/shm/snap');
    const snap = await src.snapshot();
    const target = path.join(dir, 'target');
    const r = await t.sb.backup({ to: target });
    assert.equal(r.machines, 1, 'the hibernated machine');
    assert.equal(r.snapshots, 1);
    assert.deepEqual(r.left?.map((l) => l.id), [src.id], 'the running machine is named');
    assert.match(r.left![0].why, /running/);
    const m = JSON.parse(readFileSync(path.join(target, 'docs', 'backups', r.id, 'manifest.json'), 'utf8')) as BackupManifest;
    assert.equal(m.machines.machines[0].id, hib.id);
    assert.ok(m.machines.machines[0].ram && m.machines.machines[0].disk.length >= 2, 'its memory and its whole disk chain');
    // A second backup stores no frozen disk file again (the templates' base is the same blob).
    const again = await t.sb.backup({ to: target });
    assert.equal(again.machines, 1);
    await src.remove();

    const home = mkdtempSync(path.join(tmpdir(), 'shellbase-machine-restore-'));
    const config = loadConfig({ home, port: 0, gatewayPort: 0, host: '127.0.0.1', storeSizeGb: 16 });
    config.machines.readyPerTemplate = 0;
    try {
      const restored = await restoreServer(config, target, {});
      assert.deepEqual(restored.removed, { machines: [src.id], snapshots: [] });
      const b = await startServer(config, pino({ level: 'silent' }));
      try {
        const sb = new Shellbase({ url: b.url, apiKey: readFileSync(b.adminKeyFile, 'utf8').trim() });
        const woken = sb.machines.get(hib.id);
        assert.equal((await woken.info()).state, 'hibernated');
        assert.equal((await woken.exec('cat /root/kept /dev/shm/mem')).stdout, 'on-disk\nin-memory\n', 'its disk and its memory');
        assert.ok((await counter(woken)) > before, 'its processes run on');
        await woken.exec('echo after-restore > /root/new');
        const [copy] = await sb.machines.restore(snap, 1);
        assert.equal((await copy.exec('cat /dev/shm/snap')).stdout, 'at-snapshot\n', 'the snapshot\'s memory');
        await copy.remove();
        await woken.remove();
        await sb.machines.deleteSnapshot(snap);
        assert.equal(qemuProcesses(home).length, 0);
      } finally {
        await b.close();
      }
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

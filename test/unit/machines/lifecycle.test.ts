import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { ShellbaseError } from '../../../packages/server/src/errors.ts';
import { fastMachines, type FastMachines } from './fast-machines.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const code = (c: string, re?: RegExp) => (e: unknown) => (e as ShellbaseError).code === c && (!re || re.test((e as Error).message));

/** The machines service's lifecycle over the in-memory VM backend, with the real SQLite store. */
describe('machines over in-memory VMs: lifecycle', () => {
  let t: FastMachines;
  before(async () => { t = await fastMachines(); });
  after(async () => { await t.close(); });
  const exec = async (id: string, command: string) => t.machines.exec(await t.caller(), id, { command });

  test('create, exec, files; pause refuses commands until resume; stop keeps the disk; delete removes it all', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, { memoryMb: 256 });
    assert.deepEqual([m.state, m.memoryMb, m.image, m.diskGb], ['running', 256, 'debian', 8]);
    const r = await exec(m.id, 'cat /etc/motd; echo err >&2; exit 3');
    assert.deepEqual([r.exitCode, r.stdout, r.stderr], [3, 'hello\n', 'err\n']);
    await t.machines.io.write(c, m.id, '/root/notes/a.txt', Buffer.from('kept'), 0o600);
    assert.deepEqual(await t.machines.io.read(c, m.id, '/root/notes'), { kind: 'dir', entries: ['a.txt'] });
    await assert.rejects(t.machines.io.read(c, m.id, '/root/none'), code('not_found'));

    assert.equal((await t.machines.pause(c, m.id)).state, 'paused');
    await assert.rejects(exec(m.id, 'true'), code('failed_precondition', /paused/));
    assert.equal((await t.machines.resume(c, m.id)).state, 'running');
    assert.equal((await exec(m.id, 'cat /root/notes/a.txt')).stdout, 'kept');

    assert.equal((await t.machines.stop(c, m.id)).state, 'stopped');
    await assert.rejects(exec(m.id, 'true'), code('failed_precondition', /stopped/));
    await assert.rejects(t.machines.pause(c, m.id), code('failed_precondition'));
    const row = await t.machines.rowOf(c, m.id);
    assert.ok(existsSync(row.spec.disk[0]!), 'a stopped machine keeps its disk');
    await t.machines.remove(c, m.id);
    await assert.rejects(t.machines.get(c, m.id), code('not_found'));
    assert.equal(existsSync(row.spec.disk[0]!), false, 'its disk went with it');
    assert.equal(existsSync(row.spec.disk[1]!), true, 'the template stays');
  });

  test('hibernate: memory to disk and the VM ends; the next call wakes it with its memory and processes', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, {});
    await exec(m.id, 'echo in-memory > /run/note; ticker /run/ticks 50');
    await sleep(300);
    const before = Number((await exec(m.id, 'cat /run/ticks')).stdout);
    const vms = t.backend.vms.size;
    assert.equal((await t.machines.hibernate(c, m.id)).state, 'hibernated');
    assert.equal(t.backend.vms.size, vms - 1, 'its VM ended');
    await sleep(300);
    const r = await exec(m.id, 'cat /run/note; cat /run/ticks');
    const [note, ticks] = r.stdout.split('\n');
    assert.equal(note, 'in-memory');
    assert.ok(Number(ticks) >= before && Number(ticks) < before + 5, `the process went on from where it was (${before} → ${ticks})`);
    assert.equal((await t.machines.get(c, m.id)).state, 'running', 'a call woke it');
    await t.machines.remove(c, m.id);
  });

  test('a machine with no user for its idle timeout hibernates by itself', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, { idleTimeoutMs: 200 });
    for (let i = 0; i < 50 && (await t.machines.get(c, m.id)).state !== 'hibernated'; i++) await sleep(50);
    assert.equal((await t.machines.get(c, m.id)).state, 'hibernated');
    assert.equal((await exec(m.id, 'echo awake')).stdout, 'awake\n');
    await t.machines.remove(c, m.id);
  });

  test('a guest that powers off is stopped; its disk stays', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, {});
    await exec(m.id, 'echo on-disk > /root/kept');
    await exec(m.id, 'poweroff').catch(() => undefined);
    for (let i = 0; i < 50 && (await t.machines.get(c, m.id)).state !== 'stopped'; i++) await sleep(20);
    assert.equal((await t.machines.get(c, m.id)).state, 'stopped');
    const row = await t.machines.rowOf(c, m.id);
    assert.match(readFileSync(row.spec.disk[0]!, 'utf8'), /\/root\/kept/, 'what it wrote is on its disk');
    await t.machines.remove(c, m.id);
  });

  test('an exposed port reaches the guest\'s listener through the gateway\'s target', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, {});
    await exec(m.id, 'serve 8080 hello-from-the-guest');
    const target = await t.machines.portTarget(c, m.id, 8080);
    const { socketPath, release } = await target.acquire();
    try {
      const got = await new Promise<string>((resolve) => {
        let text = '';
        connect(socketPath).on('data', (d) => { text += d.toString(); }).on('close', () => resolve(text)).on('error', () => resolve(text));
      });
      assert.equal(got, 'hello-from-the-guest');
    } finally { release(); }
    assert.equal((await t.machines.get(c, m.id)).ports[0]?.port, 8080);
    await t.machines.remove(c, m.id);
  });

  test('the disk grows online and never shrinks; a commit of a guest that cannot collect its changes is a typed refusal', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, { diskGb: 10 });
    assert.equal(m.diskGb, 10);
    assert.equal((await exec(m.id, 'cat /sys/block/vda/size')).stdout.trim(), String(10 * 2 ** 21));
    await assert.rejects(t.machines.resizeDisk(c, m.id, 9), code('invalid_argument', /never shrink/));
    assert.equal((await t.machines.resizeDisk(c, m.id, 12)).diskGb, 12);
    await assert.rejects(t.machines.commit(c, m.id, 'from-machine'), code('failed_precondition', /changes/));
    await t.machines.remove(c, m.id);
  });

  test('server restart: running machines hibernate at close and wake after; a row a crash left running is stopped', async () => {
    const c = await t.caller();
    const m = await t.machines.create(c, {});
    await exec(m.id, 'echo survived > /run/x');
    const row = await t.machines.rowOf(c, m.id);
    // What a crash leaves: a row that says running, and no process anywhere.
    await t.fake.metadata.machines.create({ ...row, id: 'm_crashed', state: 'running', spec: { ...row.spec, disk: [], ports: [] } });
    await t.restart();
    assert.equal((await t.machines.get(c, m.id)).state, 'hibernated');
    assert.equal((await exec(m.id, 'cat /run/x')).stdout, 'survived\n');
    assert.equal((await t.machines.get(c, 'm_crashed')).state, 'stopped');
    for (const id of [m.id, 'm_crashed']) await t.machines.remove(c, id);
  });
});

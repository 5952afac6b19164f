import assert from 'node:assert/strict';
import { execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { Shellbase } from '@shellbase/sdk';
import { sleep, spawnServer } from './harness.ts';

describe('a signal to the whole process group (Ctrl-C, timeout) stops the server in order', () => {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-stop-'));
  after(() => {
    // Should the stop have failed, leave nothing behind anyway.
    if (readFileSync('/proc/self/mountinfo', 'utf8').includes(path.join(home, 'store'))) execFileSync('umount', ['--lazy', path.join(home, 'store')]);
    rmSync(home, { recursive: true, force: true });
  });

  test('it exits 0 with its services asleep and nothing left mounted or running', async () => {
    const { child, sb } = await spawnServer(home, { ownGroup: true });
    const svc = await sb.context('s').services.create({ name: 'web', command: 'python3 -m http.server 8000', port: 8000 });
    assert.equal((await fetch(svc.pathUrl)).status, 200);
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    process.kill(-child.pid!, 'SIGTERM'); // the group: server, spawner, sandboxes, bridge
    assert.equal(await exited, 0);
    assert.ok(!readFileSync('/proc/self/mountinfo', 'utf8').includes(home), 'the store is unmounted');
    const ps = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
    assert.ok(!ps.includes(home), 'no process of it is left');
  });
});

describe('crash safety: kill -9 at random moments', () => {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-crash-'));
  let current: ChildProcess | null = null;
  after(async () => {
    if (current && current.exitCode === null) {
      const exited = new Promise((r) => current!.once('exit', r));
      current.kill('SIGTERM');
      await exited;
    }
    if (existsSync(path.join(home, 'store')) && readFileSync('/proc/self/mountinfo', 'utf8').includes(path.join(home, 'store'))) {
      execFileSync('umount', [path.join(home, 'store')]);
    }
    rmSync(home, { recursive: true, force: true });
  });

  test('every head stays a complete version, every acknowledged write survives, nothing leaks', async () => {
    // Per context, the files whose writes were acknowledged (queries, file writes, merges).
    const acknowledged = new Map<string, Set<string>>();
    let seq = 0;
    for (let round = 0; round < 4; round++) {
      const { child, sb } = await spawnServer(home);
      current = child;
      await checkInvariants(home, sb, acknowledged);
      let stop = false;
      const workers = Array.from({ length: 4 }, async (_, w) => {
        const name = `ctx-${w}`;
        if (!acknowledged.has(name)) acknowledged.set(name, new Set());
        const ack = acknowledged.get(name)!;
        while (!stop) {
          const k = seq++;
          try {
            const r = await sb.context(name).exec(`echo ${k} > /root/f-${k}; head -c 200k /dev/urandom > /root/blob-${w}`);
            if (r.committed) ack.add(`f-${k}`);
            if (k % 3 === 0) {
              await sb.context(name).files.write(`/root/w-${k}`, `${k}`);
              ack.add(`w-${k}`);
            }
            if (k % 5 === 0) {
              // A fork that changes something and is merged back.
              const fork = await sb.context(name).fork(`${name}-fork-${k}`);
              await fork.exec(`echo ${k} > /root/m-${k}`);
              await sb.context(name).merge(`${name}-fork-${k}`);
              ack.add(`m-${k}`);
            }
          } catch { break; /* the server died under us */ }
        }
      });
      await sleep(400 + Math.random() * 1200);
      // On a slow host the first rounds may end before anything of a kind was acknowledged: until
      // every kind has been (the final assertion), a round lasts until it is (at most a minute).
      const seen = (kind: string) => [...acknowledged.values()].some((acks) => [...acks].some((k) => k.startsWith(kind)));
      for (const until = performance.now() + 60_000; !['f-', 'w-', 'm-'].every(seen) && performance.now() < until;) await sleep(50);
      child.kill('SIGKILL');
      stop = true;
      await Promise.all(workers);
      await new Promise((r) => (child.exitCode !== null || child.signalCode !== null ? r(null) : child.once("exit", r)));
    }
    const { child, sb } = await spawnServer(home);
    current = child;
    await checkInvariants(home, sb, acknowledged);
    const all = [...acknowledged.values()].flatMap((s) => [...s]);
    for (const kind of ['f-', 'w-', 'm-']) assert.ok(all.some((k) => k.startsWith(kind)), `the workload made progress: ${kind}*`);
  });
});

async function checkInvariants(home: string, sb: Shellbase, acknowledged: Map<string, Set<string>>): Promise<void> {
  // Each head is a complete version: a query runs over it and sees every acknowledged write.
  for (const [name, keys] of acknowledged) {
    const r = await sb.context(name).exec('ls /root', { commit: 'never' });
    assert.equal(r.exitCode, 0, r.stderr);
    const files = new Set(r.stdout.split('\n'));
    for (const k of keys) assert.ok(files.has(k), `${name}: acknowledged write ${k} is present`);
  }
  // No overlay of a dead sandbox is mounted where the host sees it; only the store is, and the
  // machines' RAM directory (remounted empty by the restarted server).
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(home));
  assert.deepEqual(mounts.map((l) => l.split(' ')[4]).filter((m) => m !== path.join(home, 'machines', 'ram')), [path.join(home, 'store')], 'no leaked mounts');
  assert.ok(mounts.filter((l) => l.split(' ')[4] === path.join(home, 'machines', 'ram')).length <= 1, 'one RAM directory mount, not one per start');
  // Scratch space holds at most the pool of unused scratches.
  assert.ok(readdirSync(path.join(home, 'store', 'scratch')).length <= 8, 'no leaked scratch');
  for (const c of await sb.contexts.list()) {
    assert.equal((await sb.context(c.name).exec('true', { commit: 'never' })).exitCode, 0, c.name);
  }
  // No layer directory exists that the metadata does not know (no half-moved layer).
  const db = new Database(path.join(home, 'meta.db'), { readonly: true });
  const known = new Set((db.prepare('SELECT id FROM layers').all() as { id: string }[]).map((r) => r.id));
  db.close();
  for (const dir of readdirSync(path.join(home, 'store', 'layers'))) assert.ok(known.has(dir.replace(/\.json$/, '')), `layer ${dir} is recorded`);
  // No sandbox of a dead server is left: the instance's cgroups (an idle pool) hold no process.
  const instance = createHash('sha256').update(home).digest('hex').slice(0, 12);
  const cg = `/sys/fs/cgroup/pids/shellbase/${instance}`;
  const children = existsSync(cg) ? readdirSync(cg, { withFileTypes: true }).filter((e) => e.isDirectory()) : [];
  assert.ok(children.length <= 8, `at most a pool of idle cgroups: ${children.length}`);
  // The last query's cgroup is emptied just after its result is sent: give it a moment.
  const busy = () => children.filter((c) => existsSync(path.join(cg, c.name)) && readFileSync(path.join(cg, c.name, 'cgroup.procs'), 'utf8') !== '');
  for (let i = 0; i < 40 && busy().length > 0; i++) await sleep(50);
  assert.deepEqual(busy().map((c) => c.name), [], 'every cgroup is empty');
  const ps = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
  assert.ok(!ps.split('\n').some((l) => l.startsWith('bwrap') && l.includes(home)), 'no sandbox left running');
}

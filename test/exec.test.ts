import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { ExecEvent } from '@shellbase/sdk';
import { NotFoundError } from '@shellbase/sdk';
import { startTestServer, type TestServer } from './harness.ts';

describe('queries: sandbox, output, commit, history', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('exit code, stdout, stderr, stdin, env, cwd and argv', async () => {
    const ctx = t.sb.context('basics');
    const r = await ctx.exec('echo out; echo err >&2; cat; echo "$GREETING"; pwd; exit 7', {
      stdin: 'from stdin\n', env: { GREETING: 'hello' }, cwd: '/etc',
    });
    assert.equal(r.exitCode, 7);
    assert.equal(r.stdout, 'out\nfrom stdin\nhello\n/etc\n');
    assert.equal(r.stderr, 'err\n');
    assert.equal(r.timedOut, false);
    assert.equal(r.oomKilled, false);
    assert.equal(r.committed, false, 'nothing written, nothing committed');
    assert.equal(r.version, r.baseVersion);
    const argv = await ctx.exec(['printf', '%s|', 'a b', '$HOME', ';']);
    assert.equal(argv.stdout, 'a b|$HOME|;|');
    assert.ok(r.usage.wallMs > 0 && r.usage.cpuMs >= 0 && r.usage.memoryPeakBytes > 0);
  });

  test('commit: a write makes a version, reads see it, and exec at an old version sees the past', async () => {
    const ctx = t.sb.context('hist');
    const w1 = await ctx.exec('echo one > /root/f');
    assert.equal(w1.committed, true);
    assert.notEqual(w1.version, w1.baseVersion);
    assert.equal(w1.usage.bytesWritten, 4);
    const w2 = await ctx.exec('echo two > /root/f; rm /etc/motd');
    assert.equal(w2.baseVersion, w1.version);
    assert.equal((await ctx.exec('cat /root/f; test -e /etc/motd || echo no-motd')).stdout, 'two\nno-motd\n');
    assert.equal((await ctx.at(w1.version).exec('cat /root/f; test -e /etc/motd && echo motd')).stdout, 'one\nmotd\n');
    const versions = await ctx.versions();
    assert.deepEqual(versions.map((v) => v.id).slice(0, 3), [w2.version, w1.version, w1.baseVersion]);
    assert.equal(versions[0].cause.kind, 'exec');
    assert.equal(versions[0].cause.command, 'echo two > /root/f; rm /etc/motd');
    assert.equal(versions[0].parent, w1.version);
    assert.equal(versions.at(-1)!.cause.kind, 'image');
    assert.equal((await ctx.versions({ limit: 1 })).length, 1);
  });

  test('commit modes: always, on-success, never', async () => {
    const ctx = t.sb.context('modes');
    assert.equal((await ctx.exec('echo a > /a; exit 1', { commit: 'on-success' })).committed, false);
    assert.equal((await ctx.exec('echo b > /b', { commit: 'never' })).committed, false);
    assert.equal((await ctx.exec('echo c > /c; exit 1', { commit: 'always' })).committed, true);
    assert.equal((await ctx.exec('echo d > /d', { commit: 'on-success' })).committed, true);
    assert.equal((await ctx.exec('ls /a /b /c /d 2>/dev/null | tr "\\n" " "')).stdout, '/c /d ');
    // A version keeps the exit code of the query that made it.
    const [d, c] = await ctx.versions({ limit: 2 });
    assert.deepEqual([d!.cause.command, d!.cause.exitCode], ['echo d > /d', 0]);
    assert.deepEqual([c!.cause.command, c!.cause.exitCode], ['echo c > /c; exit 1', 1]);
  });

  test("a query's own syncs stop at its overlay (volatile); its scratch serves the next query", async () => {
    // The commit makes a query's writes durable (syncfs of the store); a sync inside the sandbox,
    // or the overlay's unmount, must not wait for other queries' dirty data in the store.
    const ctx = t.sb.context('volatile');
    const r = await ctx.exec('echo x > /x; sync; python3 -c "import os; f = open(\'/x\', \'a\'); os.fsync(f.fileno())"; grep " / / " /proc/self/mountinfo');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, / - overlay overlay .*fsync=volatile/);
    // Read-only queries hand their scratch back to the pool: the next mounts over it again.
    for (let i = 0; i < 6; i++) assert.equal((await ctx.exec('cat /x')).stdout, 'x\n');
  });

  test('exec at a past version with commit rebases onto the head', async () => {
    const ctx = t.sb.context('past');
    const first = await ctx.exec('echo 1 > /one');
    await ctx.exec('echo 2 > /two');
    const r = await ctx.exec('echo 3 > /three', { version: first.version });
    assert.equal(r.committed, true);
    assert.equal((await ctx.exec('cat /one /two /three | tr -d "\\n"')).stdout, '123');
  });

  test('fork is O(1) and forks diverge', async () => {
    const src = t.sb.context('src');
    await src.exec('echo base > /root/base');
    const fork = await src.fork('src-fork');
    assert.equal((await fork.info()).head, (await src.info()).head);
    await fork.exec('echo forked > /root/only-in-fork');
    await src.exec('echo src > /root/only-in-src');
    assert.equal((await fork.exec('ls /root | tr "\\n" " "')).stdout, 'base only-in-fork ');
    assert.equal((await src.exec('ls /root | tr "\\n" " "')).stdout, 'base only-in-src ');
    const v = (await src.versions())[1].id;
    const old = await src.fork('src-old', { version: v });
    assert.equal((await old.info()).head, v);
    await assert.rejects(t.sb.context('nope').fork('x'), NotFoundError);
  });

  test('NDJSON streaming delivers output as it happens, then the exit event', async () => {
    const events: { ev: ExecEvent; at: number }[] = [];
    const start = Date.now();
    for await (const ev of t.sb.context('stream').execStream('echo a; sleep 0.5; echo b >&2; echo c > /file')) {
      events.push({ ev, at: Date.now() - start });
    }
    assert.deepEqual(events.map((e) => e.ev.type), ['stdout', 'stderr', 'exit']);
    assert.ok(events[1].at - events[0].at >= 300, 'the first line arrived before the command ended');
    const exit = events[2].ev as Extract<ExecEvent, { type: 'exit' }>;
    assert.equal(exit.exitCode, 0);
    assert.equal(exit.committed, true);
    assert.equal((exit as Record<string, unknown>).stdout, undefined);
  });

  test('aborting a stream kills the query', async () => {
    const abort = new AbortController();
    const ctx = t.sb.context('abort');
    const seen: string[] = [];
    await assert.rejects((async () => {
      for await (const ev of ctx.execStream('echo started; sleep 30; echo never > /never', { signal: abort.signal })) {
        if (ev.type === 'stdout') { seen.push(ev.data); abort.abort(); }
      }
    })());
    assert.deepEqual(seen, ['started\n']);
    // The killed query ran `sleep`; nothing of it remains running.
    for (let i = 0; i < 50; i++) {
      const r = await ctx.exec('test -e /never && echo yes || echo no');
      assert.equal(r.stdout, 'no\n');
      break;
    }
  });

  test('contexts are created on first use and versions of another context are usable by id', async () => {
    const r = await t.sb.context('fresh-one').exec('cat /etc/debian_version');
    assert.match(r.stdout, /^12\./);
    assert.equal((await t.sb.context('fresh-one').info()).name, 'fresh-one');
  });
});

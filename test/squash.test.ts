import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from './harness.ts';

describe('long histories: squashing keeps layer chains short and content equal', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer({ squashAbove: 6 }); });
  after(async () => { await t?.close(); });

  const headLayers = async (name: string) => {
    const md = t.server.engine.deps.metadata;
    const ctx = await md.contexts.get('t_admin', name);
    return (await md.versions.get(ctx!.head))!.layers;
  };

  test('30 versions with deletes, opaque directories and replaced image directories', async () => {
    const ctx = t.sb.context('long');
    const steps = [
      'rm /etc/motd',
      'mkdir -p /data && echo a > /data/a',
      'rm -rf /data',
      'mkdir /data && echo b > /data/b',
      'rm -rf /usr/share/doc && mkdir /usr/share/doc && echo only > /usr/share/doc/only',
      'echo file > /swap && ln -s /etc/hostname /link',
      'rm /swap && mkdir /swap && echo inside > /swap/x',
    ];
    for (let i = 0; i < 23; i++) steps.push(`echo ${i} > /root/n-${i}; echo ${i} > /root/last`);
    const probe = 'test -e /etc/motd && echo motd; ls /data; ls /usr/share/doc; readlink /link; cat /swap/x; ls /root | wc -l; cat /root/last';
    const expected = 'b\nonly\n/etc/hostname\ninside\n24\n22\n';
    const versions: string[] = [];
    for (const s of steps) versions.push((await ctx.exec(s)).version);
    await t.server.engine.squasher.idle();
    const layers = await headLayers('long');
    assert.ok(layers.length <= 8, `chain of ${layers.length} layers after squashing`);
    assert.equal((await ctx.exec(probe)).stdout, expected);
    // Older versions were rewritten too and still show their own past.
    assert.equal((await ctx.at(versions[1]).exec('cat /data/a; test -e /etc/motd || echo no-motd')).stdout, 'a\nno-motd\n');
    assert.equal((await ctx.at(versions[2]).exec('ls /data 2>&1 | head -1')).stdout, 'ls: cannot access \'/data\': No such file or directory\n');
    assert.equal((await ctx.at(versions[5]).exec('cat /swap')).stdout, 'file\n');
    // Squashing again on top of a squashed layer keeps the content.
    for (let i = 0; i < 10; i++) await ctx.exec(`echo more-${i} > /root/more-${i}`);
    await t.server.engine.squasher.idle();
    assert.ok((await headLayers('long')).length <= 8);
    assert.equal((await ctx.exec('ls /root | wc -l; cat /root/more-9; ls /data')).stdout, '34\nmore-9\nb\n');
  });
});

describe('a chain too long to mount is squashed before the query runs', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer({ squashAbove: 10_000 }); });
  after(async () => { await t?.close(); });

  test('90 layers without background squashing still mount', async () => {
    const ctx = t.sb.context('deep');
    for (let i = 0; i < 90; i++) await ctx.exec(['sh', '-c', `echo ${i} > /root/f${i}`]);
    const r = await ctx.exec('ls /root | wc -l; cat /root/f89');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, '90\n89\n');
    const md = t.server.engine.deps.metadata;
    const head = (await md.versions.get((await md.contexts.get('t_admin', 'deep'))!.head))!;
    assert.ok(head.layers.length < 20, `squashed to ${head.layers.length} layers`);
  });
});

describe('merging a fork whose layers were squashed', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer({ squashAbove: 6 }); });
  after(async () => { await t?.close(); });

  test('the fork side is rebuilt from its view and merges exactly', async () => {
    const main = t.sb.context('sq-main');
    for (let i = 0; i < 3; i++) await main.exec(`mkdir -p /w && echo ${i} > /w/base-${i}`);
    const fork = await main.fork('sq-fork');
    for (let i = 0; i < 12; i++) await fork.exec(`echo ${i} > /w/fork-${i}`);
    await fork.exec('rm /w/base-0 && mkdir -p /w/tree && echo t > /w/tree/x && ln -s fork-1 /w/link');
    await t.server.engine.squasher.idle();
    await main.exec('echo main > /w/main');
    const r = await t.http('POST', '/v1/contexts/sq-main/merge', { body: { from: 'sq-fork' } });
    assert.equal(r.status, 200, r.text);
    const merged = (await main.versions())[0];
    assert.equal(merged.cause.kind, 'merge');
    assert.ok(merged.bytes > 0, 'the fork side was rebuilt as one new layer');
    const ls = (await main.exec('ls /w | tr "\\n" " "; cat /w/link /w/tree/x', { commit: 'never' })).stdout;
    const expected = ['base-1', 'base-2', ...Array.from({ length: 12 }, (_, i) => `fork-${i}`), 'link', 'main', 'tree'].sort();
    assert.equal(ls, `${expected.join(' ')} 1\nt\n`);
  });
});

import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from './harness.ts';

/** A GET with the path sent as is: fetch would resolve `..` and `%2e%2e` before sending. */
function rawGet(t: TestServer, path: string): Promise<{ status: number; text: string; json: any }> {
  const url = new URL(t.server.url);
  return new Promise((resolve, reject) => {
    http.get({ host: url.hostname, port: url.port, path, headers: { authorization: `Bearer ${t.key}` } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => { let json; try { json = JSON.parse(text); } catch { /* bytes */ } resolve({ status: res.statusCode!, text, json }); });
    }).on('error', reject);
  });
}

/** What the files API and a sandbox say about one path: its bytes, or that it cannot be read. */
async function viaApi(t: TestServer, ctx: string, path: string, version?: string): Promise<string> {
  const encoded = path.split('/').map((s) => (s === '..' ? '%2e%2e' : encodeURIComponent(s))).join('/');
  const r = await rawGet(t, `/v1/contexts/${ctx}/files${encoded}${version ? `?version=${version}` : ''}`);
  if (r.status !== 200) return `ERR ${r.json?.error?.code}`;
  return r.json?.entries ? `DIR ${r.json.entries.map((e: { name: string }) => e.name).join(' ')}` : r.text;
}

async function viaSandbox(t: TestServer, ctx: string, path: string, version?: string): Promise<string> {
  const q = JSON.stringify(path);
  const r = await t.sb.context(ctx).exec(`if [ -d ${q} ]; then echo "DIR $(ls -A ${q} | tr '\\n' ' ' | sed 's/ $//')"; elif cat ${q} 2>/dev/null; then :; else echo ERR; fi`, { version, commit: 'never' });
  const out = r.stdout;
  if (out.startsWith('DIR ')) return out.trimEnd();
  return out === 'ERR\n' ? 'ERR' : out;
}

describe('files: reads from the layer store agree with the sandbox', () => {
  let t: TestServer;
  let version: string;
  before(async () => {
    t = await startTestServer();
    const ctx = t.sb.context('paths');
    // Three layers: the image, fixtures, then deletions and replacements over them.
    await ctx.exec([
      'mkdir -p /fx/dir/sub /fx/opq', 'echo inner > /fx/dir/sub/file', 'echo lower > /fx/opq/old',
      'echo gone > /fx/deleted', 'ln -s /etc/hostname /fx/abs', 'ln -s dir/sub/file /fx/rel', 'ln -s rel /fx/chain',
      'ln -s loop2 /fx/loop1', 'ln -s loop1 /fx/loop2', 'ln -s /fx/dir /fx/dirlink', 'ln -s ../../../../../etc/os-release /fx/escape',
      'ln -s /nonexistent /fx/dangling',
    ].join(' && '));
    version = (await ctx.exec('rm /fx/deleted /etc/motd && rm -rf /fx/opq && mkdir /fx/opq && echo new > /fx/opq/fresh')).version;
  });
  after(async () => { await t?.close(); });

  const cases = [
    '/fx/dir/sub/file', '/fx/abs', '/fx/rel', '/fx/chain', '/fx/loop1', '/fx/dirlink/sub/file', '/fx/dirlink/../dir/sub/file',
    '/fx/escape', '/fx/dangling', '/fx/deleted', '/etc/motd', '/fx/opq', '/fx/opq/old', '/fx/opq/fresh', '/fx', '/fx/dir',
    '/../../../etc/hostname', '/fx/../../etc/hostname', '/fx/dir/sub/file/x', '/bin/true', '/usr/lib/os-release', '/root',
  ];
  for (const p of cases) {
    test(`path ${p}`, async () => {
      const api = await viaApi(t, 'paths', p);
      const sandbox = await viaSandbox(t, 'paths', p);
      if (sandbox === 'ERR') assert.match(api, /^ERR (not_found|invalid_argument)$/, `${p}: api says ${api.slice(0, 80)}`);
      else assert.equal(api, sandbox, p);
    });
  }

  test('reads at a past version see the past', async () => {
    const versions = await t.sb.context('paths').versions();
    const past = versions[1].id;
    assert.equal(await viaApi(t, 'paths', '/fx/deleted', past), 'gone\n');
    assert.equal(await viaApi(t, 'paths', '/fx/opq/old', past), 'lower\n');
    assert.equal(await viaApi(t, 'paths', '/fx/deleted', version), 'ERR not_found');
  });

  test('stat reports symlinks without following them', async () => {
    const r = await t.http('GET', '/v1/contexts/paths/stat/fx/abs');
    assert.deepEqual({ type: r.json.type, target: r.json.target }, { type: 'symlink', target: '/etc/hostname' });
    const f = await t.http('GET', '/v1/contexts/paths/stat/fx/dir/sub/file');
    assert.deepEqual({ type: f.json.type, size: f.json.size, mode: f.json.mode }, { type: 'file', size: 6, mode: 0o644 });
    assert.equal((await t.http('GET', '/v1/contexts/paths/stat/fx/nothing')).status, 404);
  });

  test('bad paths: NUL, empty segments, too long, loops', async () => {
    // A symlink to a name no file system holds: a typed error, not a 500.
    await t.sb.context('paths').exec(`ln -s ${'y'.repeat(300)} /fx/toolong`);
    const link = await t.http('GET', '/v1/contexts/paths/files/fx/toolong');
    assert.equal(link.status, 400, link.text.slice(0, 200));
    // A tree deeper than PATH_MAX cannot become a layer: a typed error, and the context does not move.
    const head = (await t.sb.context('paths').info()).head;
    const queries = async () => (await t.sb.usage({ groupBy: 'context' })).items.find((i) => i.key === 'paths')?.queries ?? 0;
    const ran = await queries();
    const deep = await t.http('POST', '/v1/contexts/paths/exec', { body: { command: `d=/fx; for i in $(seq 1 40); do d=$d/${'d'.repeat(120)}; done; mkdir -p $d && touch $d/deep` } });
    assert.equal(deep.status, 400, deep.text.slice(0, 200));
    assert.match(deep.json.error.message, /longer than 4096 bytes/);
    assert.equal((await t.http('GET', `/v1/contexts/paths/files/fx/${'n'.repeat(255)}`)).status, 404, 'a name of 255 bytes is fine');
    assert.equal((await t.sb.context('paths').info()).head, head);
    assert.equal(await queries(), ran + 1, 'the refused query is metered: it ran');
    for (const [url, status] of [
      [`/v1/contexts/paths/files/fx/${'n'.repeat(256)}`, 400],
      ['/v1/contexts/paths/files/fx%00x', 400], ['/v1/contexts/paths/files/fx//dir', 400],
      [`/v1/contexts/paths/files/${'a/'.repeat(2100)}x`, 400], ['/v1/contexts/paths/files/fx/loop1', 400],
      ['/v1/contexts/paths/files/fx/dir/sub/file/x', 400],
    ] as const) {
      const r = await t.http('GET', url);
      assert.equal(r.status, status, `${url.slice(0, 60)}: ${r.text.slice(0, 200)}`);
      assert.ok(r.json.error.hint, url.slice(0, 60));
    }
    // Encoded dot segments stay inside the context.
    const r = await rawGet(t, '/v1/contexts/paths/files/%2e%2e/%2e%2e/etc/hostname');
    assert.equal(r.status, 200);
    assert.equal(r.text, await viaSandbox(t, 'paths', '/etc/hostname'));
  });

  test('range requests and large files stream', async () => {
    await t.sb.context('big').exec('head -c 200M /dev/zero | tr "\\0" a > /big; printf 0123456789 > /digits');
    const part = await t.http('GET', '/v1/contexts/big/files/digits', { headers: { range: 'bytes=2-5' } });
    assert.equal(part.status, 206);
    assert.equal(part.text, '2345');
    assert.equal(part.headers.get('content-range'), 'bytes 2-5/10');
    assert.equal((await t.http('GET', '/v1/contexts/big/files/digits', { headers: { range: 'bytes=-3' } })).text, '789');
    assert.equal((await t.http('GET', '/v1/contexts/big/files/digits', { headers: { range: 'bytes=20-30' } })).status, 400);
    const rss = process.memoryUsage().rss;
    const res = await fetch(`${t.server.url}/v1/contexts/big/files/big`, { headers: { authorization: `Bearer ${t.key}` } });
    let total = 0;
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) total += chunk.length;
    assert.equal(total, 200 * 1024 * 1024);
    assert.ok(process.memoryUsage().rss - rss < 100 * 1024 * 1024, 'the file was not buffered');
  });
});

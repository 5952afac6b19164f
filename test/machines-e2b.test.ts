import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CommandExitError, FileNotFoundError, InvalidArgumentError, NotFoundError, Sandbox, SandboxNotFoundError, AuthenticationError, RateLimitError, TimeoutError, type FilesystemEvent, type SandboxOpts } from 'e2b';
import { closeWithSandboxes, sleep, startTestServer, until, type TestServer } from './harness.ts';

// The unmodified `e2b` SDK against a real server, machines under TCG. One sandbox lives through the
// suite; tests that need another make it and kill it, so at most two VMs run at once. Every
// sandbox is killed in the end, failures included (and the server's close ends any VM left).
const DOMAIN = 'e2b.test';


describe('the E2B SDK against shellbase', { timeout: 600_000 }, () => {
  let t: TestServer;
  let sbx: Sandbox;
  const made: Sandbox[] = [];
  const create = async (template?: string | SandboxOpts, opts?: SandboxOpts) => {
    const s = typeof template === 'string' ? await Sandbox.create(template, opts) : await Sandbox.create(template);
    made.push(s);
    return s;
  };

  before(async () => {
    t = await startTestServer();
    Object.assign(process.env, { E2B_API_URL: t.server.url, E2B_SANDBOX_URL: t.server.url, E2B_API_KEY: t.key, E2B_DOMAIN: DOMAIN });
    sbx = await create({ metadata: { suite: 'e2b', role: 'main' }, envs: { FROM_CREATE: 'yes' } });
  });

  after(() => closeWithSandboxes(t, made));

  test('create, then commands.run: output and exit code; the sandbox is a shellbase machine', async () => {
    const r = await sbx.commands.run('echo hi');
    assert.deepEqual([r.exitCode, r.stdout, r.stderr], [0, 'hi\n', '']);
    const m = await t.sb.machines.get(sbx.sandboxId).info();
    assert.equal(m.state, 'running');
    assert.equal(m.image, 'debian');
    assert.equal(await sbx.isRunning(), true);
  });

  test('a foreground command with envs, cwd, user and streaming callbacks', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const r = await sbx.commands.run('echo "$FOO $FROM_CREATE"; pwd; id -un; echo oops >&2', {
      envs: { FOO: 'bar' }, cwd: '/tmp', user: 'root', onStdout: (d) => { out.push(d); }, onStderr: (d) => { err.push(d); },
    });
    assert.equal(r.stdout, 'bar yes\n/tmp\nroot\n');
    assert.equal(out.join(''), r.stdout);
    assert.equal(err.join(''), 'oops\n');
    // The default user: uid 1000 in /home/user, and the working directory is its home.
    const d = await sbx.commands.run('id -u; id -un; pwd; echo $HOME');
    assert.equal(d.stdout, '1000\nuser\n/home/user\n/home/user\n');
    // stdin: a process with an open stdin, fed and closed through the handle.
    const cat = await sbx.commands.run('cat; echo done', { background: true, stdin: true });
    await cat.sendStdin('hello ');
    await sbx.commands.sendStdin(cat.pid, 'world\n');
    await cat.closeStdin();
    assert.equal((await cat.wait()).stdout, 'hello world\ndone\n');
    // A command's timeout kills it.
    await assert.rejects(sbx.commands.run('sleep 30; echo late', { timeoutMs: 1500 }), TimeoutError);
    // A timeout above the tenant's maximum (a query's, 1 h here) is refused before anything runs, naming it and the maximum.
    await assert.rejects(sbx.commands.run('true', { timeoutMs: 2 * 3_600_000 }), (e: unknown) =>
      e instanceof InvalidArgumentError && /timeoutMs = 7200000 \(2h\) is above this tenant's maximum of 3600000 ms/.test(e.message));
    await until('the timed-out command to be gone', async () => (await sbx.commands.run('pgrep -x sleep || true')).stdout === '');
  });

  test('a non-zero exit is CommandExitError with the output', async () => {
    const e = await sbx.commands.run('echo out; echo err >&2; exit 3').then(() => null, (x: unknown) => x);
    assert.ok(e instanceof CommandExitError, String(e));
    assert.deepEqual([e.exitCode, e.stdout, e.stderr, e.error], [3, 'out\n', 'err\n', 'exit status 3']);
  });

  test('a background process survives between commands: list, connect, kill, wait', async () => {
    const h = await sbx.commands.run('i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done', { background: true });
    await until('ticks', () => h.stdout.includes('tick 2'));
    await h.disconnect();
    assert.equal((await sbx.commands.run('echo between')).stdout, 'between\n');
    const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid);
    assert.ok(listed, 'listed');
    assert.deepEqual([listed.cmd, listed.args[0], listed.args[1]], ['/bin/bash', '-l', '-c']);
    const again: string[] = [];
    const c = await sbx.commands.connect(h.pid, { onStdout: (d) => { again.push(d); } });
    await until('ticks after connecting again', () => again.join('').includes('tick'));
    assert.equal(await sbx.commands.kill(h.pid), true);
    const e = await c.wait().then(() => null, (x: unknown) => x);
    assert.ok(e instanceof CommandExitError, String(e));
    assert.equal(e.exitCode, -1);
    assert.match(e.error ?? '', /signal: killed/);
    assert.equal((await sbx.commands.list()).some((p) => p.pid === h.pid), false);
    assert.equal(await sbx.commands.kill(h.pid), false, 'a process that is gone');
    await assert.rejects(sbx.commands.connect(h.pid), NotFoundError);
  });

  test('files: write, read, list, exists, getInfo, makeDir, rename, remove; relative paths in the home', async () => {
    const info = await sbx.files.write('notes/a.txt', 'alpha');
    assert.equal(info.path, '/home/user/notes/a.txt');
    await sbx.files.write([{ path: '/home/user/notes/b.bin', data: new Uint8Array([0, 1, 2, 255]).buffer }, { path: 'notes/c.txt', data: 'gamma' }]);
    assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'alpha');
    assert.deepEqual([...await sbx.files.read('notes/b.bin', { format: 'bytes' })], [0, 1, 2, 255]);
    assert.equal(await (await sbx.files.read('notes/c.txt', { format: 'blob' })).text(), 'gamma');
    const stream = await sbx.files.read('notes/a.txt', { format: 'stream' });
    assert.equal(await new Response(stream).text(), 'alpha');
    await sbx.files.write('empty.txt', '');
    assert.equal(await sbx.files.read('empty.txt'), '');
    const listed = await sbx.files.list('notes');
    assert.deepEqual(listed.map((e) => [e.name, e.type, e.size]), [['a.txt', 'file', 5], ['b.bin', 'file', 4], ['c.txt', 'file', 5]]);
    assert.deepEqual([listed[0].owner, listed[0].group, listed[0].permissions], ['user', 'user', '-rw-r--r--']);
    assert.equal(await sbx.files.makeDir('notes/deep/er'), true);
    assert.equal(await sbx.files.makeDir('notes/deep/er'), false, 'exists already');
    assert.deepEqual((await sbx.files.list('notes', { depth: 2 })).map((e) => e.path).filter((p) => p.includes('deep')), ['/home/user/notes/deep', '/home/user/notes/deep/er']);
    assert.equal(await sbx.files.exists('notes/a.txt'), true);
    assert.equal(await sbx.files.exists('notes/nope'), false);
    const st = await sbx.files.getInfo('notes/deep');
    assert.deepEqual([st.type, st.name, st.path], ['dir', 'deep', '/home/user/notes/deep']);
    assert.ok(st.modifiedTime && Math.abs(st.modifiedTime.getTime() - Date.now()) < 120_000, String(st.modifiedTime));
    const moved = await sbx.files.rename('notes/a.txt', 'notes/deep/a2.txt');
    assert.equal(moved.path, '/home/user/notes/deep/a2.txt');
    assert.equal(await sbx.files.exists('notes/a.txt'), false);
    await sbx.files.remove('notes/deep');
    assert.equal(await sbx.files.exists('notes/deep'), false);
    await assert.rejects(sbx.files.read('notes/missing.txt'), FileNotFoundError);
    await assert.rejects(sbx.files.getInfo('notes/missing.txt'), FileNotFoundError);
    // Permissions are the guest's: the default user cannot write to /root, root can.
    await assert.rejects(sbx.files.write('/root/x.txt', 'no'));
    await sbx.files.write('/root/x.txt', 'yes', { user: 'root' });
    assert.equal((await sbx.commands.run('cat /root/x.txt; stat -c %U /root/x.txt', { user: 'root' })).stdout, 'yesroot\n');
    // Streamed and gzip bodies both ways; signed URLs for plain HTTP clients.
    const big = 'x'.repeat(3 << 20);
    const body = new Blob([big]).stream();
    assert.equal((await sbx.files.write('big.txt', body)).path, '/home/user/big.txt');
    assert.equal((await sbx.files.read('big.txt', { gzip: true })).length, big.length);
    await sbx.files.write('zipped.txt', 'compressed on the way', { gzip: true });
    assert.equal(await sbx.files.read('zipped.txt'), 'compressed on the way');
    const down = await fetch(await sbx.downloadUrl('zipped.txt'));
    assert.deepEqual([down.status, await down.text()], [200, 'compressed on the way']);
    const form = new FormData();
    form.append('file', new Blob(['uploaded']), 'up.txt');
    const up = await fetch(await sbx.uploadUrl('up.txt'), { method: 'POST', body: form });
    assert.equal(up.status, 200, await up.text());
    assert.equal(await sbx.files.read('up.txt'), 'uploaded');
    const forged = new URL(await sbx.downloadUrl('zipped.txt'));
    forged.searchParams.set('path', '/etc/shadow');
    assert.equal((await fetch(forged)).status, 401);
    // What the SDK wrote, the guest sees.
    assert.equal((await sbx.commands.run('cat notes/c.txt; stat -c %U notes/c.txt')).stdout, 'gammauser\n');
  });

  test('watchDir reports create, write, rename and remove', async () => {
    await sbx.files.makeDir('watched');
    const events: FilesystemEvent[] = [];
    const w = await sbx.files.watchDir('watched', (e) => { events.push(e); }, { recursive: true });
    try {
      await sbx.files.write('watched/one.txt', '1');
      await sbx.commands.run('mkdir watched/sub && echo 2 > watched/sub/two.txt && mv watched/one.txt watched/uno.txt && rm watched/uno.txt');
      const seen = (type: string, name: string) => events.some((e) => e.type === type && e.name === name);
      await until('the events', () => seen('create', 'one.txt') && seen('write', 'one.txt') && seen('rename', 'one.txt')
        && seen('create', 'uno.txt') && seen('remove', 'uno.txt') && seen('create', 'sub') && seen('create', 'sub/two.txt'));
    } finally {
      await w.stop();
    }
    await assert.rejects(sbx.files.watchDir('no-such-dir', () => undefined), FileNotFoundError);
  });

  test('envd calls the SDK does not make: polling watchers, StreamInput (Connect JSON, raw)', async () => {
    const info = await fetch(`${t.server.url}/sandboxes/${sbx.sandboxId}`, { headers: { 'x-api-key': t.key } });
    const token = ((await info.json()) as { envdAccessToken: string }).envdAccessToken;
    const headers = (type: string) => ({ 'content-type': type, 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': token });
    const unary = async (path: string, body: object) => {
      const r = await fetch(`${t.server.url}/${path}`, { method: 'POST', headers: headers('application/json'), body: JSON.stringify(body) });
      return { status: r.status, json: await r.json() as Record<string, unknown> };
    };
    await sbx.files.makeDir('polled');
    const { json: created } = await unary('filesystem.Filesystem/CreateWatcher', { path: '/home/user/polled' });
    const watcherId = created.watcherId as string;
    await sbx.files.write('polled/p.txt', 'p');
    const events: { name: string; type: string }[] = [];
    await until('polled events', async () => {
      events.push(...((await unary('filesystem.Filesystem/GetWatcherEvents', { watcherId })).json.events as typeof events));
      return events.some((e) => e.name === 'p.txt' && e.type === 'EVENT_TYPE_CREATE');
    });
    assert.deepEqual((await unary('filesystem.Filesystem/RemoveWatcher', { watcherId })).status, 200);
    const gone = await unary('filesystem.Filesystem/GetWatcherEvents', { watcherId });
    assert.deepEqual([gone.status, gone.json.code], [404, 'not_found']);
    // StreamInput: a client stream of enveloped messages (start, then data), one reply at the end.
    const cat = await sbx.commands.run('cat', { background: true, stdin: true });
    const env = (flags: number, m: object) => { const j = Buffer.from(JSON.stringify(m)); const h = Buffer.alloc(5); h[0] = flags; h.writeUInt32BE(j.length, 1); return Buffer.concat([h, j]); };
    const body = Buffer.concat([env(0, { start: { process: { pid: cat.pid } } }), env(0, { data: { input: { stdin: Buffer.from('streamed\n').toString('base64') } } }), env(2, {})]);
    const r = await fetch(`${t.server.url}/process.Process/StreamInput`, { method: 'POST', headers: headers('application/connect+json'), body });
    assert.equal(r.status, 200);
    await cat.closeStdin();
    assert.equal((await cat.wait()).stdout, 'streamed\n');
  });

  test('a PTY session: input, resize, kill', async () => {
    let screen = '';
    const dec = new TextDecoder();
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { screen += dec.decode(d, { stream: true }); } });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo $((6*7)); tty\n'));
    await until('the answer', () => /\b42\r\n\/dev\/pts\/\d+/.test(screen));
    await sbx.pty.resize(pty.pid, { cols: 100, rows: 40 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'));
    await until('the new size', () => screen.includes('40 100'));
    assert.equal(await sbx.pty.kill(pty.pid), true);
    await assert.rejects(pty.wait(), CommandExitError);
  });

  test('getHost(port) reaches a guest port through the API port', async () => {
    await sbx.files.write('site/index.html', 'hello from the sandbox');
    // Not `python3 -m http.server`: its HTTPServer looks its own name up, and DNS in a guest with no network only times out.
    await sbx.commands.run(`cd site && python3 -c "import socketserver, http.server as h; socketserver.TCPServer(('', 8000), h.SimpleHTTPRequestHandler).serve_forever()"`, { background: true, timeoutMs: 0 });
    const host = sbx.getHost(8000);
    assert.equal(host, `8000-${sbx.sandboxId}.${DOMAIN}`);
    const api = new URL(t.server.url);
    const get = () => new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host: api.hostname, port: api.port, path: '/index.html', headers: { host }, agent: false }, (res) => {
        let body = '';
        res.on('data', (c) => { body += c; });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end();
    });
    let r = { status: 0, body: '' };
    await until('the guest server', async () => { r = await get(); return r.status === 200; });
    assert.equal(r.body, 'hello from the sandbox');
    // With E2B_SANDBOX_URL the SDKs name the port in a header instead (the code interpreter's 49999 so).
    const byHeader = await fetch(`${t.server.url}/index.html`, { headers: { 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': '8000' } });
    assert.equal(byHeader.status, 200);
    assert.equal(await byHeader.text(), 'hello from the sandbox');
    // An upgrade (a WebSocket's handshake) becomes a byte pipe: a guest server that answers 101, then echoes in capitals.
    await sbx.files.write('upgrade.py', [
      'import socket', 's = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", 9000)); s.listen()',
      'c, _ = s.accept(); d = b""', 'while b"\\r\\n\\r\\n" not in d: d += c.recv(4096)',
      'c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n")',
      'while (x := c.recv(4096)): c.sendall(x.upper())', '',
    ].join('\n'));
    await sbx.commands.run('python3 upgrade.py', { background: true, timeoutMs: 0 });
    const piped = () => new Promise<string>((resolve, reject) => {
      const sock = connect(Number(api.port), api.hostname, () => sock.write(`GET / HTTP/1.1\r\nHost: ${sbx.getHost(9000)}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n`));
      let got = '';
      sock.on('data', (c) => { got += c; if (got.endsWith('\r\n\r\n') && got.startsWith('HTTP/1.1 101')) sock.write('piped'); if (got.includes('PIPED')) sock.end(); });
      sock.on('close', () => resolve(got));
      sock.on('error', reject);
    });
    let up = '';
    await until('the upgrade', async () => { up = await piped(); return up.includes('PIPED'); });
    assert.match(up, /^HTTP\/1.1 101 Switching Protocols\r\n[^]*\r\n\r\nPIPED$/);
  });

  test('getInfo, setTimeout, list with metadata filter and paging', async () => {
    const info = await sbx.getInfo();
    assert.deepEqual([info.sandboxId, info.templateId, info.state, info.metadata], [sbx.sandboxId, 'base', 'running', { suite: 'e2b', role: 'main' }]);
    await sbx.setTimeout(600_000);
    const later = await sbx.getInfo();
    assert.ok(Math.abs(later.endAt.getTime() - (Date.now() + 600_000)) < 10_000, String(later.endAt));
    const other = await create({ metadata: { suite: 'e2b', role: 'other' } });
    try {
      const mine = await Sandbox.list({ query: { metadata: { role: 'main' } } }).nextItems();
      assert.deepEqual(mine.map((s) => s.sandboxId), [sbx.sandboxId]);
      const pages = Sandbox.list({ query: { metadata: { suite: 'e2b' } }, limit: 1 });
      const ids: string[] = [];
      while (pages.hasNext) ids.push(...(await pages.nextItems()).map((s) => s.sandboxId));
      assert.deepEqual(ids.sort(), [sbx.sandboxId, other.sandboxId].sort());
    } finally {
      await other.kill();
    }
  });

  test('pause and resume: memory and processes kept; a paused sandbox takes no commands', async () => {
    const s = await create({ timeoutMs: 120_000 });
    await s.commands.run("setsid -f sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' >/dev/null 2>&1", { user: 'root' });
    await s.commands.run('echo kept > /tmp/mem');
    assert.equal(await s.pause(), true);
    assert.equal(await s.pause(), false, 'paused already');
    assert.equal((await s.getInfo()).state, 'paused');
    assert.equal((await t.sb.machines.get(s.sandboxId).info()).state, 'hibernated');
    assert.equal(await s.isRunning(), false);
    await assert.rejects(s.commands.run('true'));
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal((await back.getInfo()).state, 'running');
    assert.equal((await back.commands.run('cat /tmp/mem')).stdout, 'kept\n');
    const n1 = Number((await back.commands.run('cat /tmp/count')).stdout);
    await sleep(500);
    assert.ok(Number((await back.commands.run('cat /tmp/count')).stdout) > n1, 'the counter runs again');
    await back.kill();
  });

  test('fork and snapshots: copies with the files and processes of the moment', async () => {
    await sbx.files.write('forked.txt', 'before');
    const ticker = await sbx.commands.run('while true; do date +%s%N > /tmp/tick; sleep 0.1; done', { background: true, timeoutMs: 0 });
    const [copy] = await sbx.fork();
    assert.ok(copy instanceof Sandbox, String(copy));
    made.push(copy);
    assert.notEqual(copy.sandboxId, sbx.sandboxId);
    assert.equal(await copy.files.read('forked.txt'), 'before');
    await copy.files.write('forked.txt', 'copy');
    assert.equal(await sbx.files.read('forked.txt'), 'before', 'the source keeps its own disk');
    assert.ok((await copy.commands.list()).some((p) => p.pid === ticker.pid), 'the copy has the process');
    await copy.kill();
    await ticker.kill();
    const snap = await sbx.createSnapshot();
    assert.match(snap.snapshotId, /^s_/);
    assert.deepEqual((await sbx.listSnapshots().nextItems()).map((x) => x.snapshotId), [snap.snapshotId]);
    const restored = await create(snap.snapshotId);
    assert.equal(await restored.files.read('forked.txt'), 'before');
    assert.equal((await restored.getInfo()).templateId, snap.snapshotId);
    await restored.kill();
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false);
  });

  test('kill; the timeout ends a sandbox (deleted, or paused when asked)', async () => {
    const running = async (s: Sandbox) => (await Sandbox.list({ query: { state: ['running'] } }).nextItems()).some((x) => x.sandboxId === s.sandboxId);
    const a = await create({ timeoutMs: 3000 });
    assert.equal(await running(a), true);
    await until('the timeout of the first', async () => !(await running(a)), 30_000);
    await assert.rejects(a.getInfo(), SandboxNotFoundError);
    await assert.rejects(t.sb.machines.get(a.sandboxId).info());
    const b = await create({ timeoutMs: 3000, lifecycle: { onTimeout: 'pause' } });
    await until('the timeout of the second', async () => !(await running(b)), 30_000);
    assert.equal((await b.getInfo()).state, 'paused');
    assert.equal((await t.sb.machines.get(b.sandboxId).info()).state, 'hibernated');
    assert.equal(await b.kill(), true);
    assert.equal(await b.kill(), false, 'gone already');
    await assert.rejects(Sandbox.connect(b.sandboxId), SandboxNotFoundError);
  });

  test('two tenants\' keys do not see each other\'s sandboxes', async () => {
    const other = (await t.http('POST', '/v1/tenants', { body: { name: 'e2b-other', quotas: { runningMachines: 1 } } })).json as { apiKey: string };
    const opts = { apiKey: other.apiKey };
    assert.deepEqual(await Sandbox.list(opts).nextItems(), []);
    await assert.rejects(Sandbox.connect(sbx.sandboxId, opts), SandboxNotFoundError);
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, opts), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(sbx.sandboxId, opts), false);
    await assert.rejects(Sandbox.create({ apiKey: 'sb_not_a_key' }), AuthenticationError);
    // envd traffic needs the sandbox's own token, not only its id.
    const r = await fetch(`${t.server.url}/process.Process/List`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': 'wrong' }, body: '{}',
    });
    assert.equal(r.status, 401);
    assert.equal((await sbx.commands.run('echo still mine')).stdout, 'still mine\n');
    // Its quota is its own: one running machine, and the second is a RateLimitError.
    const theirs = await create(opts);
    assert.deepEqual((await Sandbox.list(opts).nextItems()).map((s) => s.sandboxId), [theirs.sandboxId]);
    assert.equal((await Sandbox.list().nextItems()).some((s) => s.sandboxId === theirs.sandboxId), false);
    await assert.rejects(Sandbox.create(opts), RateLimitError);
    await theirs.kill();
  });

  test('egress: allowOut under denyOut all is an allow list, no internet access is none; PUT /sandboxes/{id}/network replaces the rules of a running sandbox', async () => {
    const s = await create({ network: { allowOut: ['api.example.test'], denyOut: ['0.0.0.0/0'] } });
    const machine = t.sb.machines.get(s.sandboxId);
    assert.deepEqual((await machine.info()).network, { egress: 'allow', domains: ['api.example.test'] });
    // The guest's curl goes through the egress proxy, whose refusal says why: the policy, or (for a
    // name the policy allows) that it does not resolve here.
    const refusal = async (host: string) => (await s.commands.run(`curl -s http://${host}/`)).stdout;
    const byPolicy = /the network policy \(.*\) does not allow/;
    assert.match(await refusal('other.example.test'), byPolicy);
    assert.doesNotMatch(await refusal('api.example.test'), byPolicy, 'allowed by the policy');
    const info = await fetch(`${t.server.url}/sandboxes/${s.sandboxId}`, { headers: { 'x-api-key': t.key } }).then((r) => r.json()) as Record<string, unknown>;
    assert.equal(info.allowInternetAccess, true);
    assert.deepEqual(info.network, { allowPublicTraffic: true, allowOut: ['api.example.test'], denyOut: ['0.0.0.0/0'] });
    const put = await fetch(`${t.server.url}/sandboxes/${s.sandboxId}/network`, {
      method: 'PUT', headers: { 'x-api-key': t.key, 'content-type': 'application/json' }, body: JSON.stringify({ allow_internet_access: false }),
    });
    assert.equal(put.status, 204, await put.text());
    assert.deepEqual((await machine.info()).network, { egress: 'none' });
    assert.match(await refusal('api.example.test'), /the network policy \(none\) does not allow/, 'the running sandbox follows the new rules');
    const bad = await fetch(`${t.server.url}/sandboxes/${s.sandboxId}/network`, {
      method: 'PUT', headers: { 'x-api-key': t.key, 'content-type': 'application/json' }, body: JSON.stringify({ denyOut: ['10.0.0.0/8'] }),
    });
    assert.equal(bad.status, 400);
    assert.deepEqual((await machine.info()).network, { egress: 'none' }, 'a refused change changes nothing');
    await s.kill();
    const closed = await create({ allowInternetAccess: false });
    assert.deepEqual((await t.sb.machines.get(closed.sandboxId).info()).network, { egress: 'none' });
    await closed.kill();
  });

  test('bad input is a 400 (or 404) that makes nothing', async () => {
    const before = (await t.sb.machines.list()).length;
    await assert.rejects(Sandbox.create({ network: { allowOut: ['1.1.1.1'], denyOut: ['0.0.0.0/0'] } }), /400: network.allowOut "1.1.1.1": shellbase allows domains, not addresses/);
    await assert.rejects(Sandbox.create({ network: { denyOut: ['10.0.0.0/8'] } }), /400: network.denyOut "10.0.0.0\/8": shellbase denies by allow list only/);
    await assert.rejects(Sandbox.create({ network: { egressProxy: { address: 'proxy.example.com:1080' } } }), /400: network.egressProxy is not supported/);
    await assert.rejects(Sandbox.create({ timeoutMs: 8 * 86_400_000 }), /400: timeout must be/);
    await assert.rejects(Sandbox.create({ metadata: { n: 1 as unknown as string } }), /400: metadata.n must be a string/);
    await assert.rejects(Sandbox.create('no-such-template'), /404: template "no-such-template" not found/);
    await assert.rejects(sbx.setTimeout(-5), /400/);
    await assert.rejects(sbx.commands.run('true', { cwd: '/no/such/dir' }), /cwd/);
    await assert.rejects(sbx.commands.run('true', { user: 'nobody-here' }), /no user "nobody-here"/);
    await assert.rejects(sbx.files.list('/etc/passwd'), /not a directory/i);
    await assert.rejects(sbx.commands.sendStdin(999_999, 'x'), NotFoundError);
    assert.equal((await t.sb.machines.list()).length, before);
  });

  test('a sandbox\'s files committed into a context; a context as a template', async () => {
    await sbx.files.write('/srv/app/config.json', '{"v":1}', { user: 'root' });
    const version = await t.sb.machines.get(sbx.sandboxId).commit('from-e2b');
    assert.match(version, /^v_/);
    assert.equal((await t.sb.context('from-e2b').files.read('/srv/app/config.json')).toString(), '{"v":1}');
    const again = await create('from-e2b');
    assert.equal(await again.files.read('/srv/app/config.json'), '{"v":1}');
    assert.equal((await again.getInfo()).templateId, 'from-e2b');
    await again.kill();
  });
});

import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { sleep, startTestServer, type TestServer } from './harness.ts';
import { COMMIT, HOST, fetchAll, tlsUpstream, type TlsUpstream } from './trust-fixture.ts';

/**
 * The host's TLS authorities inside queries, services and builds: an authority made here signs
 * an HTTPS upstream on loopback behind the egress proxy; until the server is told of it
 * (SHELLBASE_EXTRA_CA_FILE, read again when it changes) no sandbox trusts the upstream, then
 * curl, Python, Node's fetch and git do, and nothing of the authority is ever in a version.
 */
describe('trust: the host\'s authorities in sandboxes', () => {
  let up: TlsUpstream;
  let t: TestServer;

  before(async () => {
    up = await tlsUpstream();
    t = await startTestServer(up.config);
    // Node.js for the query (the image has none): the runtime set-up installed, as a file of the context.
    await t.sb.context('tls').files.write('/usr/local/bin/node', readFileSync(process.execPath), { mode: 0o755 });
  });
  after(async () => {
    await t?.close();
    up?.close();
  });

  const nodeFetch = (port: number) =>
    `echo "node: $(node -e "fetch('https://${HOST}:${port}/').then(r => r.text()).then(t => process.stdout.write(t), e => console.log(String(e.cause ?? e)))" 2>&1 | tail -1)"`;

  test('without the authority: TLS to the upstream fails in a query', async () => {
    const r = await t.sb.context('tls').exec(`curl -sS https://${HOST}:${up.port}/`, { commit: 'never', timeoutMs: 60_000 });
    assert.equal(r.exitCode, 60, `curl: ${r.stderr}`);
    assert.match(r.stderr, /certificate/);
  });

  test('with it: curl, Python, Node\'s fetch and git trust the upstream; nothing of the authority is a change', async () => {
    up.trust();
    await sleep(1100); // the server looks at the host's authorities at most once a second
    const before = (await t.sb.context('tls').exec('true', { commit: 'never' })).version;
    const r = await t.sb.context('tls').exec(`(${fetchAll(up.port)}; ${nodeFetch(up.port)}) | tee /root/fetched`, { timeoutMs: 120_000 });
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, `curl: trusted\npython: trusted\ngit: ${COMMIT}\trefs/heads/main\nnode: trusted\n`);
    assert.equal(r.committed, true);
    const diff = await t.sb.context('tls').diff({ from: before, to: r.version });
    assert.deepEqual(diff.changes.filter((c) => c.type !== 'dir').map((c) => c.path), ['/root/fetched']);
    // The store holds the context's own files: its bundle is the image's, the authority's files are absent.
    const bundle = (await t.sb.context('tls').files.read('/etc/ssl/certs/ca-certificates.crt')).toString();
    assert.ok(!bundle.includes(up.ca.trim().split('\n')[1]!), 'the stored bundle is the context\'s own');
    await assert.rejects(t.sb.context('tls').files.read('/usr/local/share/shellbase/ca/authorities.pem'), (e: Error & { code?: string }) => e.code === 'not_found');
    // A fork elsewhere inherits the context's files, which name no authority.
    const seen = await t.sb.context('tls').exec('cat /etc/ssl/certs/ca-certificates.crt | grep -c BEGIN; echo "$SSL_CERT_FILE $NODE_EXTRA_CA_CERTS"', { commit: 'never' });
    assert.match(seen.stdout, /\/usr\/local\/share\/shellbase\/ca\/bundle\.pem \/usr\/local\/share\/shellbase\/ca\/authorities\.pem/);
  });

  test('a query\'s own variables win over the host\'s', async () => {
    const r = await t.sb.context('tls').exec(`echo "$SSL_CERT_FILE"; curl -sS https://${HOST}:${up.port}/`, {
      commit: 'never', env: { SSL_CERT_FILE: '/nowhere.pem' }, timeoutMs: 60_000,
    });
    assert.equal(r.stdout, '/nowhere.pem\n');
    assert.equal(r.exitCode, 77, `curl reads the file the query named: ${r.stderr}`);
  });

  test('services and Dockerfile builds trust it too', async () => {
    const service = await t.sb.context('tls').services.create({
      name: 'fetcher', port: 8000, command: `{ ${fetchAll(up.port)}; } > /tmp/index.html; cd /tmp && exec python3 -m http.server 8000`,
    });
    const page = await (await fetch(service.pathUrl)).text();
    assert.match(page, /^curl: trusted\npython: trusted\n/);
    await t.sb.context('tls').services.remove('fetcher');
    const dir = path.join(up.dir, 'build');
    mkdirSync(dir);
    writeFileSync(path.join(dir, 'Dockerfile'), `FROM debian\nRUN curl -sS https://${HOST}:${up.port}/ > /fetched\n`);
    const build = await t.sb.build({ context: dir, tag: 'tls-build' });
    assert.equal((await t.sb.context(build.context).files.read('/fetched')).toString(), 'trusted\n');
    const built = await t.sb.context(build.context).diff({ to: build.version });
    assert.equal(built.changes.some((c) => c.path.startsWith('/usr/local/share/shellbase') || c.path.startsWith('/etc/ssl')), false, 'the build\'s layers hold no authority');
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from './harness.ts';
import { COMMIT, HOST, fetchAll, tlsUpstream, type TlsUpstream } from './trust-fixture.ts';

/**
 * The host's TLS authorities in a machine's guest: on its disk (stacked above the context's
 * layers when its template is made), in the variables of the commands its agent runs and of
 * login shells, and never in what the machine commits. One template boot under TCG.
 */
describe('machines: the host\'s authorities in the guest', { timeout: 900_000 }, () => {
  let up: TlsUpstream;
  let t: TestServer;

  before(async () => {
    up = await tlsUpstream();
    up.trust();
    t = await startTestServer(up.config);
  });
  after(async () => {
    await t?.close();
    up?.close();
  });

  test('curl, Python and git in the guest trust the upstream; a login shell has the variables; a commit carries no authority', async () => {
    const ctx = t.sb.context('tls-machine');
    const base = (await ctx.exec('echo base > /root/base')).version;
    const m = await t.sb.machines.create({ context: 'tls-machine' });
    try {
      const r = await m.exec(`${fetchAll(up.port)}; echo > /root/from-machine`, { timeoutMs: 120_000 });
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, `curl: trusted\npython: trusted\ngit: ${COMMIT}\trefs/heads/main\n`);
      const login = await m.exec(['env', '-i', 'bash', '-lc', 'echo "$REQUESTS_CA_BUNDLE"'], { timeoutMs: 60_000 });
      assert.equal(login.stdout, '/usr/local/share/shellbase/ca/bundle.pem\n');
      const version = await m.commit('tls-machine');
      const diff = await ctx.diff({ from: base, to: version });
      const paths = diff.changes.map((c) => c.path);
      assert.ok(paths.includes('/root/from-machine'), paths.join(' '));
      assert.deepEqual(paths.filter((p) => /^\/(etc\/ssl|usr\/local\/share\/shellbase|etc\/profile\.d\/shellbase|etc\/systemd\/system\.conf\.d\/shellbase-ca)/.test(p)), []);
    } finally {
      await m.remove();
    }
  });
});

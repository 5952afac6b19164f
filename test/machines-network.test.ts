import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { MachineHandle } from '@shellbase/sdk';
import { debianRepository } from './debian-repo.ts';
import { startTestServer, type TestServer } from './harness.ts';

/**
 * Machines reach the outside only through the egress enforcement point, under the same
 * policies as queries: QEMU's guestfwd hands each connection to 10.0.2.100:3128/1080 to the
 * machine's egress session. 127.0.0.2 stands for the internet (as in network.test.ts); nothing
 * leaves the host. At most two VMs at once, one template boot under TCG.
 */
const UPSTREAM = '127.0.0.2';
const HOSTS = { 'api.example.test': UPSTREAM, 'other.example.test': UPSTREAM };
const code = (c: string) => (e: Error & { code?: string }) => e.code === c;

describe('machines: egress under a policy', { timeout: 900_000 }, () => {
  let t: TestServer;
  let upstream: Server;
  let port = 0;
  let dir = '';

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'shellbase-mnet-'));
    const repo = debianRepository(dir);
    upstream = createServer((req, res) => {
      const file = /^\/repo\/(?:\.\/)?([\w.+-]+)$/.exec(req.url ?? '');
      if (file) {
        const body = repo.get(file[1]);
        res.writeHead(body ? 200 : 404).end(body ?? '');
        return;
      }
      res.end(`upstream says hi to ${req.url}\n`);
    });
    await new Promise<void>((r) => upstream.listen(0, UPSTREAM, r));
    port = (upstream.address() as AddressInfo).port;
    t = await startTestServer({
      egress: { default: { egress: 'public' }, allowCidrs: [`${UPSTREAM}/32`], hosts: HOSTS, maxPerSandbox: 16, maxPerTenant: 1024, logDays: 7 },
    });
  });
  after(async () => {
    await t?.close();
    upstream?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const sh = async (m: MachineHandle, command: string) => {
    const r = await m.exec(command, { timeoutMs: 120_000 });
    return { ...r, out: `${r.stdout}${r.stderr}` };
  };

  test('public: curl, Python, a login shell, a systemd unit and apt-get reach the upstream through the proxy; bytes and active time are metered; the log names the machine', async () => {
    await t.sb.context('web').exec('true');
    const site = t.sb.context('site');
    await site.files.write('/srv/index.html', 'a shared service\n');
    await site.services.create({ name: 'www', command: 'cd /srv && exec python3 -m http.server 8000', port: 8000, share: 'tenant' });
    const m = await t.sb.machines.create({ context: 'web' });
    try {
      const url = `http://api.example.test:${port}`;
      const curl = await sh(m, `curl -sS ${url}/curl && python3 -c "import urllib.request; print(urllib.request.urlopen('${url}/py').read().decode(), end='')"`
        + ` && curl -sS -x socks5h://10.0.2.100:1080 ${url}/socks`);
      assert.equal(curl.exitCode, 0, curl.out);
      assert.equal(curl.stdout, 'upstream says hi to /curl\nupstream says hi to /py\nupstream says hi to /socks\n');
      // The settings are in the guest for programs the agent does not start.
      assert.equal((await sh(m, "env -i bash -lc 'echo $https_proxy'")).stdout, 'http://10.0.2.100:3128\n', 'login shells (profile.d)');
      const unit = await sh(m, `systemd-run --wait --pipe --quiet curl -sS ${url}/unit`);
      assert.equal(unit.stdout, 'upstream says hi to /unit\n', `systemd units (the manager's default environment): ${unit.out}`);
      assert.equal((await sh(m, 'systemctl is-enabled apt-daily.timer apt-daily-upgrade.timer')).stdout, 'masked\nmasked\n', 'no daily apt run takes the dpkg lock');
      const apt = await sh(m, `echo 'deb [trusted=yes] ${url}/repo ./' > /etc/apt/sources.list.d/local.list`
        + ' && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin apt-get update -q -o Dir::Etc::sourcelist=/etc/apt/sources.list.d/local.list -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0'
        + ' && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin apt-get install -y -q shellbase-hello && shellbase-hello');
      assert.equal(apt.exitCode, 0, apt.out.slice(-2000));
      assert.match(apt.stdout, /hello from a Debian package\n$/, 'apt without any proxy variable (its own configuration)');
      // A service shared with the tenant answers at SERVICE.CONTEXT.internal through the proxy (woken by the request).
      const linked = await sh(m, 'curl -sS http://www.site.internal:8000/index.html');
      assert.equal(linked.stdout, 'a shared service\n', linked.out);
      // An exposed port with access "key": its URL is not enough, the tenant's API key is asked for (and not passed on).
      await sh(m, `mkdir -p /srv/www && echo guest page > /srv/www/index.html && cd /srv/www && setsid -f python3 -c "import http.server as h, socketserver as s; s.TCPServer(('', 8080), h.SimpleHTTPRequestHandler).serve_forever()" >/dev/null 2>&1`);
      const keyed = await m.expose(8080, { access: 'key' });
      assert.equal(keyed.access, 'key');
      assert.equal((await m.info()).ports.find((p) => p.port === 8080)?.access, 'key');
      const get = async (headers: Record<string, string> = {}) => {
        for (let i = 0; ; i++) {
          const r = await fetch(`${keyed.pathUrl}index.html`, { headers });
          if (r.status !== 503 || i > 100) return [r.status, await r.text()] as const;
          await new Promise((res) => setTimeout(res, 200)); // the guest's server is starting
        }
      };
      assert.equal((await get())[0], 401);
      assert.deepEqual(await get({ authorization: `Bearer ${t.key}` }), [200, 'guest page\n']);
      assert.equal((await m.expose(8080, { access: 'url' })).url, keyed.url, 'the same URL, now open');
      assert.deepEqual(await get(), [200, 'guest page\n']);
      // Only the proxy: no route out, no host, no other address of QEMU's network.
      const direct = await sh(m, `curl -sS --noproxy '*' --max-time 5 http://${UPSTREAM}:${port}/ ; curl -sS --noproxy '*' --max-time 5 http://10.0.2.2:${port}/`);
      assert.doesNotMatch(direct.stdout, /upstream says hi/, direct.out);
    } finally {
      await m.remove();
    }
    const item = (await t.sb.usage({ groupBy: 'kind' })).items.find((i) => i.key === 'machine');
    assert.ok(item && item.egressBytes > 0 && item.ingressBytes > 0, JSON.stringify(item));
    assert.ok(item.machineActiveSeconds > 0 && item.machineActiveSeconds <= item.machineSeconds, JSON.stringify(item));
    const log = await t.sb.context('web').network.log();
    assert.ok(log.some((c) => c.kind === 'machine' && c.host === 'api.example.test' && c.allowed), JSON.stringify(log));
  });

  test('none and allow lists narrow the context\'s policy at create, and forks keep them; wider or malformed requests make nothing', async () => {
    const before = (await t.sb.machines.list()).length;
    await t.sb.context('locked').exec('true');
    await t.sb.context('locked').network.set({ egress: 'allow', domains: ['other.example.test'] });
    const wider = await t.http('POST', '/v1/machines', { body: { context: 'locked', network: { egress: 'public' } } });
    assert.equal(wider.status, 403, wider.text);
    const bad = await t.http('POST', '/v1/machines', { body: { network: { egress: 'sometimes' } } });
    assert.equal(bad.status, 400, bad.text);
    assert.equal((await t.sb.machines.list()).length, before, 'nothing created');

    const allowed = await t.sb.machines.create({ context: 'locked' });
    const none = await t.sb.machines.create({ network: { egress: 'none' } });
    try {
      assert.equal((await none.info()).network?.egress, 'none');
      assert.equal((await allowed.info()).network, undefined, 'its context\'s policy, not one of its own');
      const other = await sh(allowed, `curl -sS http://other.example.test:${port}/ok; curl -sS -o /dev/null -w '%{http_code}\\n' http://api.example.test:${port}/no`);
      assert.equal(other.stdout, 'upstream says hi to /ok\n403\n', other.out);
      const refused = `curl -s -o /dev/null -w '%{http_code}\\n' --max-time 10 http://other.example.test:${port}/`;
      assert.equal((await sh(none, refused)).stdout, '403\n', 'the proxy refuses what the policy does not allow');
      await allowed.remove();
      const [fork] = await none.fork(1);
      try {
        assert.equal((await fork.info()).network?.egress, 'none');
        assert.equal((await sh(fork, refused)).stdout, '403\n');
      } finally {
        await fork.remove();
      }
    } finally {
      await allowed.remove().catch(() => undefined);
      await none.remove();
    }
    await assert.rejects(t.sb.machines.create({ context: 'locked', network: { egress: 'allow', domains: ['api.example.test'] } }), code('forbidden'));
    const log = await t.sb.context('locked').network.log();
    assert.ok(log.some((c) => c.kind === 'machine' && c.host === 'api.example.test' && !c.allowed && /does not allow/.test(c.reason ?? '')), JSON.stringify(log));
  });
});

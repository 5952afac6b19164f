import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { tar } from '../packages/sdk/src/tar.ts';
import { startTestServer, type TestServer } from './harness.ts';

describe('machines from built contexts', { timeout: 600_000 }, () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('a machine boots a context a Dockerfile built and sees its files', async () => {
    const dockerfile = 'FROM debian\nWORKDIR /srv/app\nCOPY app.txt ./\nRUN echo "built by RUN" > /srv/app/run.txt\n';
    const built = await t.sb.build({ context: tar([{ path: 'Dockerfile', data: dockerfile }, { path: 'app.txt', data: 'copied\n' }]), tag: 'built-for-vm' });
    const m = await t.sb.machines.create({ context: 'built-for-vm' });
    try {
      const r = await m.exec('cat /srv/app/app.txt /srv/app/run.txt; test -d /run/systemd/system && echo booted');
      assert.equal(r.stdout, 'copied\nbuilt by RUN\nbooted\n', r.stderr);
      assert.equal((await t.sb.context('built-for-vm').info()).head, built.version);
    } finally {
      await m.remove();
    }
  });
});

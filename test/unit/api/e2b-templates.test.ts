import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { imageInfo } from '../../../packages/server/src/images/index.ts';
import { fileNode, parentOf, type Node } from '../../../packages/server/src/store/snapshotter/memory/tree.ts';
import { fastApi, type FastApi } from './fast-api.ts';

/** The code-interpreter image, as the fast tier makes images: a few files, /sbin/init a link to systemd, its recipe recorded as built. */
function addCodeInterpreter(api: FastApi): void {
  const { cache } = api.fake.engine.deps.config;
  const info = imageInfo(cache, 'code-interpreter');
  mkdirSync(path.dirname(info.rootfs), { recursive: true });
  writeFileSync(path.join(path.dirname(info.rootfs), 'recipe.json'), '{}');
  api.fake.snapshotter.addImage(info.layerId, { '/etc/motd': 'the code interpreter\n', '/root/': '', '/tmp/': '', '/run/': '', '/lib/systemd/systemd': '' });
  const root = (api.fake.snapshotter as unknown as { layers: Map<string, { root: Node }> }).layers.get(info.layerId)!.root;
  const { dir, name } = parentOf(root, 'sbin/init', true);
  dir.children!.set(name, { ...fileNode(Buffer.alloc(0)), kind: 'symlink', data: undefined, target: '/lib/systemd/systemd' });
}

test('E2B templates code-interpreter-v1 and code-interpreter are the code-interpreter image; unbuilt, the create says how to build it', async () => {
  const api = await fastApi({}, { vms: true });
  try {
    const create = (templateID: string) => fetch(`${api.url}/v2/sandboxes`, {
      method: 'POST', headers: { 'x-api-key': api.key, 'content-type': 'application/json' }, body: JSON.stringify({ templateID }),
    });
    const unbuilt = await create('code-interpreter-v1');
    const refused = await unbuilt.json() as { code: number; message: string };
    assert.equal(unbuilt.status, 412, JSON.stringify(refused));
    assert.match(refused.message, /image code-interpreter is not built on this host.*shellbase image build code-interpreter/);

    addCodeInterpreter(api);
    for (const templateID of ['code-interpreter-v1', 'code-interpreter']) {
      const res = await create(templateID);
      const made = await res.json() as { sandboxID: string; templateID: string };
      assert.equal(res.status, 201, JSON.stringify(made));
      assert.equal(made.templateID, templateID);
      const m = await api.sb.machines.get(made.sandboxID).info();
      assert.deepEqual([m.image, m.state], ['code-interpreter', 'running']);
      assert.equal((await api.sb.machines.get(made.sandboxID).exec('cat /etc/motd')).stdout, 'the code interpreter\n');
    }
    const base = await (await create('base')).json() as { sandboxID: string };
    assert.equal((await api.sb.machines.get(base.sandboxID).info()).image, 'debian', 'base is still debian');
  } finally {
    await api.close();
  }
});

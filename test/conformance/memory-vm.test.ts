import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { MachineHost } from '../../packages/server/src/machines/host.ts';
import { MachineLayout } from '../../packages/server/src/machines/layout.ts';
import { Templates } from '../../packages/server/src/machines/pool/templates.ts';
import { MemoryVmBackend } from '../../packages/server/src/machines/vm/memory/memory-backend.ts';
import { MemorySnapshotter } from '../../packages/server/src/store/snapshotter/memory/memory-snapshotter.ts';
import { vmBackendConformance } from './vm-backend.ts';

vmBackendConformance('in-memory VMs', async () => {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-memory-vm-'));
  const host = new MachineHost(new MachineLayout(home, path.join(home, 'cache')), new MemoryVmBackend());
  const snapshotter = new MemorySnapshotter();
  snapshotter.addImage('image:test:1', { '/etc/motd': 'welcome\n', '/root/': '', '/sbin/init': '' });
  // The template is made as machines make theirs (machines/pool/templates.ts).
  const templates = new Templates(host, snapshotter, pino({ level: 'silent' }));
  const src = { root: host.layout.templatesDir(null), layers: ['image:test:1'], memoryMb: 256, cpus: 1 };
  const tpl = await templates.use(src, await templates.resolve(src), async (t) => t, (e) => { throw e; });
  return {
    host,
    template: { base: host.layout.templateFiles(tpl.dir).base, disk: tpl.disk, ram: tpl.ram, state: tpl.state, memoryMb: 256, cpus: 1, ramPadKb: tpl.ramPadKb },
    ticker: (file) => ['ticker', file, '100'],
    serve: (port, text) => ['serve', String(port), text],
    done: async () => { await host.close(); rmSync(home, { recursive: true, force: true }); },
  };
});

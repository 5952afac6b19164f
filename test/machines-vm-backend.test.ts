import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MachineHost } from '../packages/server/src/machines/host.ts';
import { MachineLayout } from '../packages/server/src/machines/layout.ts';
import { QemuBackend } from '../packages/server/src/machines/vm/qemu-backend.ts';
import { vmBackendConformance } from './conformance/vm-backend.ts';
import { startTestServer } from './harness.ts';

// The VM backend's suite over QEMU (TCG here: a restore takes seconds). The template is the debian
// image's, as a real server makes it (in the shared cache: built once per host); the backend runs
// over a home of its own.
vmBackendConformance('QEMU VMs', async () => {
  const t = await startTestServer();
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-qemu-vm-'));
  chmodSync(home, 0o711); // QEMU's uid passes through it, as a server's home
  try {
    const m = await t.sb.machines.create({ memoryMb: 512 });
    const row = (await t.server.machines.find(m.id))!;
    await m.remove();
    const layout = new MachineLayout(home, t.config.cache);
    const files = layout.templateFiles(path.dirname(row.spec.disk[1]!));
    const { deps } = t.server.engine;
    const backend = await QemuBackend.open({
      layout, cache: t.config.cache, accel: t.config.machines.accel, budgetMb: 4096, runtime: deps.host, forward: () => deps.forwarder.installed(),
    });
    const host = new MachineHost(layout, backend);
    return {
      host,
      template: { base: files.base, disk: files.disk, ram: files.ram, state: files.state, memoryMb: row.spec.memoryMb, cpus: row.spec.cpus, ramPadKb: row.spec.ramPadKb ?? 0 },
      ticker: (file) => ['sh', '-c', `setsid -f sh -c 'i=0; while true; do i=$((i+1)); echo $i > ${file}; sleep 0.1; done' >/dev/null 2>&1`],
      serve: (port, text) => ['sh', '-c', `mkdir -p /srv/p${port} && echo ${text} > /srv/p${port}/index.html && setsid -f python3 -m http.server ${port} -d /srv/p${port} >/dev/null 2>&1`],
      done: async () => { await host.close(); rmSync(home, { recursive: true, force: true }); await t.close(); },
    };
  } catch (e) {
    rmSync(home, { recursive: true, force: true });
    await t.close();
    throw e;
  }
});

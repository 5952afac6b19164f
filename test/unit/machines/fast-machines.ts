import { readdirSync } from 'node:fs';
import type { MachinesConfig, ServerConfig } from '../../../packages/server/src/config.ts';
import type { Caller } from '../../../packages/server/src/core/deps.ts';
import { imageInfo } from '../../../packages/server/src/images/index.ts';
import { Machines } from '../../../packages/server/src/machines/index.ts';
import { MemoryVmBackend } from '../../../packages/server/src/machines/vm/memory/memory-backend.ts';
import { fileNode, parentOf, type Node } from '../../../packages/server/src/store/snapshotter/memory/tree.ts';
import type { MemorySnapshotter } from '../../../packages/server/src/store/snapshotter/memory/memory-snapshotter.ts';
import { fakeEngine, type FakeEngine } from '../engine/fake-engine.ts';

export interface FastMachines {
  fake: FakeEngine;
  machines: Machines;
  backend: MemoryVmBackend;
  caller(t?: string, quotas?: Caller['quotas']): Promise<Caller>;
  /** A new `Machines` over the same store, home and backend (a server's restart), after this one closed. */
  restart(): Promise<Machines>;
  close(): Promise<void>;
}

/**
 * The fast tier's debian image (fake-engine.ts) as a machine can boot it: systemd as /sbin/init,
 * a link as Debian has it (the engine checks that before a create). The in-memory snapshotter
 * makes images of files only, so the link is put in its tree here.
 */
export function makeBootable(snapshotter: MemorySnapshotter, cache: string): void {
  const { layerId } = imageInfo(cache, 'debian');
  snapshotter.addImage(layerId, { '/etc/motd': 'hello\n', '/root/': '', '/tmp/': '', '/run/': '', '/lib/systemd/systemd': '' });
  const root = (snapshotter as unknown as { layers: Map<string, { root: Node }> }).layers.get(layerId)!.root;
  const { dir, name } = parentOf(root, 'sbin/init', true);
  dir.children!.set(name, { ...fileNode(Buffer.alloc(0)), kind: 'symlink', data: undefined, target: '/lib/systemd/systemd' });
}

/**
 * The machines service over the fast tier's engine (in-memory snapshotter and runtime, a SQLite
 * file) and the in-memory VM backend: no root, no QEMU. `machines` changes the machines'
 * settings (no ready VMs unless asked, as the integration tests have it).
 */
export async function fastMachines(o: { machines?: Partial<MachinesConfig>; config?: Partial<ServerConfig> } = {}): Promise<FastMachines> {
  const fake = await fakeEngine(o.config);
  const { deps } = fake.engine;
  makeBootable(fake.snapshotter, deps.config.cache);
  Object.assign(deps.config.machines, { readyPerTemplate: 0, ...o.machines });
  const backend = new MemoryVmBackend();
  let machines = new Machines(deps, fake.engine.contextAccess(), undefined, backend);
  await machines.open();
  let closed = false;
  const t: FastMachines = {
    fake, backend, caller: (tenant, quotas) => fake.caller(tenant, quotas),
    get machines() { return machines; },
    async restart() {
      await machines.close();
      machines = new Machines(deps, fake.engine.contextAccess(), undefined, backend);
      await machines.open();
      return machines;
    },
    async close() {
      if (closed) return;
      closed = true;
      await machines.close();
      await fake.close();
    },
  };
  return t;
}

/** The files under a directory, recursively (names relative to it). */
export function filesUnder(dir: string): string[] {
  try {
    return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => e.name);
  } catch {
    return [];
  }
}

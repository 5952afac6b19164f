import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig, type ServerConfig } from '../../../packages/server/src/config.ts';
import type { Caller } from '../../../packages/server/src/core/deps.ts';
import { Pins } from '../../../packages/server/src/core/pins.ts';
import { Engine } from '../../../packages/server/src/engine/engine.ts';
import { Events } from '../../../packages/server/src/events/index.ts';
import { imageInfo } from '../../../packages/server/src/images/index.ts';
import { startNetwork } from '../../../packages/server/src/net/index.ts';
import { PrometheusMeter } from '../../../packages/server/src/meter/prometheus.ts';
import { MemoryRuntime } from '../../../packages/server/src/runtime/memory/memory-runtime.ts';
import { SqliteMetadataStore } from '../../../packages/server/src/store/metadata/sqlite/sqlite-store.ts';
import { MemorySnapshotter } from '../../../packages/server/src/store/snapshotter/memory/memory-snapshotter.ts';

export interface FakeEngine {
  engine: Engine;
  /** Tenants' events over the same SQLite file (webhooks go out through the engine's egress point). */
  events: Events;
  snapshotter: MemorySnapshotter;
  metadata: SqliteMetadataStore;
  pins: Pins;
  /** A caller of tenant `t` (made on first use) with a fresh hold. */
  caller(t?: string, quotas?: Caller['quotas']): Promise<Caller>;
  close(): Promise<void>;
}

/**
 * The engine over the in-memory snapshotter and runtime and a SQLite file: the
 * fast tier (no root, no mounts, no sandboxes). The `debian` image is a few
 * files: /etc/motd, /root, /tmp.
 */
export async function fakeEngine(overrides: Partial<ServerConfig> = {}): Promise<FakeEngine> {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-fast-'));
  const cache = path.join(home, 'cache');
  const config = loadConfig({ home, cache, durable: false, ...overrides });
  // The memory runtime has no network: no egress sessions (the egress tests run real sandboxes).
  config.egress.default = { egress: 'none' };
  const info = imageInfo(cache, 'debian');
  mkdirSync(path.dirname(info.rootfs), { recursive: true });
  writeFileSync(path.join(path.dirname(info.rootfs), 'recipe.json'), '{}');
  const snapshotter = new MemorySnapshotter();
  snapshotter.addImage(info.layerId, { '/etc/motd': 'hello\n', '/root/': '', '/tmp/': '' });
  const metadata = new SqliteMetadataStore(path.join(home, 'meta.db'));
  const pins = new Pins();
  const log = pino({ level: 'silent' });
  const meter = new PrometheusMeter({ storedBytes: () => metadata.tenants.totalStoredBytes() });
  const network = startNetwork(config, metadata.egressLog, meter, log);
  const events = new Events({ metadata, egress: network.egress, defaultPolicy: config.egress.default, readOthers: false, log });
  const engine = new Engine({
    config, metadata, snapshotter, runtime: new MemoryRuntime(snapshotter), log, meter, pins,
    durability: { layers: async () => undefined, metadata: async () => undefined },
    ...network, events: events.log,
  });
  await engine.recover();
  const made = new Set<string>();
  return {
    engine, events, snapshotter, metadata, pins,
    async caller(t = 't1', quotas) {
      if (!made.has(t)) {
        await metadata.tenants.create({ id: t, name: t, admin: false, createdAt: new Date().toISOString(), ...(quotas ? { quotas } : {}) });
        made.add(t);
      }
      return { tenantId: t, admin: false, ...(quotas ? { quotas } : {}), hold: pins.hold() };
    },
    async close() {
      await engine.close();
      await events.close();
      await metadata.close();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

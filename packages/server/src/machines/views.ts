import type { Machine } from '@shellbase/protocol';
import type { MachineRow } from '../store/metadata/types.js';
import { gatewayUrls } from '../util/tokens.js';

/** A machine's row as the API shows it (its ports as gateway URLs). */
export function machineView(row: MachineRow, gatewayPort: number): Machine {
  const s = row.spec;
  return {
    id: row.id, state: row.state, image: s.image, ...(s.context ? { context: s.context, version: s.version } : {}), memoryMb: s.memoryMb, cpus: s.cpus,
    diskGb: s.diskGb, ...(s.network ? { network: s.network } : {}), idleTimeoutMs: s.idleTimeoutMs, ...(s.snapshot ? { snapshot: s.snapshot } : {}),
    ports: s.ports.map((p) => ({ port: p.port, ...gatewayUrls(gatewayPort, p.token), access: p.access ?? 'url' })),
    ...(s.mounts?.length ? { mounts: s.mounts.map((m) => ({ ...m })) } : {}), createdAt: row.createdAt,
  };
}

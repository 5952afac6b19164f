import { lookup } from 'node:dns/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { EgressConfig } from './settings.js';
import type { Meter } from '../meter/types.js';
import type { EgressLogRepository } from '../store/metadata/types.js';
import { AddressRules } from './addresses.js';
import { EgressAudit } from './audit.js';
import { Egress } from './egress.js';
import { Forwarder } from './forwarder.js';

export { Egress } from './egress.js';
export { Forwarder } from './forwarder.js';

/**
 * The server's network side: the egress enforcement point (its sessions'
 * sockets under `$HOME/egress`) and the forwarder binary sandboxes run first
 * (`$HOME/bin/sbx-forward`).
 */
export function startNetwork(config: { home: string; egress: EgressConfig }, log: EgressLogRepository, meter: Meter, logger: Logger): { egress: Egress; forwarder: Forwarder } {
  const { egress: e } = config;
  const audit = new EgressAudit(log, meter, logger);
  const egress = new Egress({
    dir: path.join(config.home, 'egress'),
    rules: new AddressRules(e.allowCidrs),
    // The proxy resolves names itself (with the host's resolver); SHELLBASE_EGRESS_HOSTS answers first.
    resolve: async (host) => {
      const mapped = e.hosts[host.toLowerCase()];
      if (mapped) return [mapped];
      return (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);
    },
    maxPerSession: e.maxPerSandbox,
    maxPerTenant: e.maxPerTenant,
    record: (row) => audit.record(row),
    flush: () => audit.flush(),
    log: logger,
  });
  return { egress, forwarder: new Forwarder(path.join(config.home, 'bin')) };
}

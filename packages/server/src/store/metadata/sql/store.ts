import type { MetadataStore } from '../types.js';
import { SqlContexts } from './contexts.js';
import { SqlEgressLog } from './egress-log.js';
import { SqlEvents, SqlWebhooks } from './events.js';
import type { SqlDb } from './db.js';
import { SqlBuildCache, SqlImages } from './images.js';
import { SqlMachines } from './machines.js';
import { SqlServices } from './services.js';
import { SqlTenants } from './tenants.js';
import { SqlUsage } from './usage.js';
import { SqlVersions } from './versions.js';

/** The repositories over one database; a dialect adds durability and reclaiming (sqlite/, postgres/). */
export abstract class SqlMetadataStore implements MetadataStore {
  readonly tenants: SqlTenants;
  readonly contexts: SqlContexts;
  readonly versions: SqlVersions;
  readonly usage: SqlUsage;
  readonly services: SqlServices;
  readonly machines: SqlMachines;
  readonly egressLog: SqlEgressLog;
  readonly images: SqlImages;
  readonly buildCache: SqlBuildCache;
  readonly events: SqlEvents;
  readonly webhooks: SqlWebhooks;

  /** `own`: a dialect's own repositories where it does better than the shared SQL (postgres/). */
  constructor(readonly db: SqlDb, own: { versions?: SqlVersions; tenants?: SqlTenants } = {}) {
    this.tenants = own.tenants ?? new SqlTenants(db);
    this.contexts = new SqlContexts(db);
    this.versions = own.versions ?? new SqlVersions(db);
    this.usage = new SqlUsage(db);
    this.services = new SqlServices(db);
    this.machines = new SqlMachines(db);
    this.egressLog = new SqlEgressLog(db);
    this.images = new SqlImages(db);
    this.buildCache = new SqlBuildCache(db);
    this.events = new SqlEvents(db);
    this.webhooks = new SqlWebhooks(db);
  }

  abstract sync(): Promise<void>;
  abstract reclaim(maxPages: number): Promise<number>;
  abstract close(): Promise<void>;
}

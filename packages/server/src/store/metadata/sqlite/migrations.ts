/**
 * Schema migrations of the SQLite dialect, applied in order; `PRAGMA
 * user_version` records how many ran. Never edit a migration that shipped:
 * append a new one.
 */
export const MIGRATIONS: string[] = [
  `CREATE TABLE tenants (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL UNIQUE,
     admin INTEGER NOT NULL DEFAULT 0,
     created_at TEXT NOT NULL
   );
   CREATE TABLE api_keys (
     hash TEXT PRIMARY KEY,
     tenant_id TEXT NOT NULL REFERENCES tenants(id),
     created_at TEXT NOT NULL,
     revoked_at TEXT
   );
   CREATE TABLE layers (
     id TEXT PRIMARY KEY,
     kind TEXT NOT NULL,
     bytes INTEGER NOT NULL,
     created_at TEXT NOT NULL
   );
   CREATE TABLE versions (
     id TEXT PRIMARY KEY,
     tenant_id TEXT NOT NULL,
     parent TEXT REFERENCES versions(id),
     depth INTEGER NOT NULL,
     layers TEXT NOT NULL,
     changes TEXT,
     cause TEXT NOT NULL,
     bytes INTEGER NOT NULL,
     created_at TEXT NOT NULL
   );
   CREATE INDEX versions_parent ON versions(parent);
   CREATE TABLE contexts (
     tenant_id TEXT NOT NULL REFERENCES tenants(id),
     name TEXT NOT NULL,
     head TEXT NOT NULL REFERENCES versions(id),
     image TEXT NOT NULL,
     created_at TEXT NOT NULL,
     updated_at TEXT NOT NULL,
     PRIMARY KEY (tenant_id, name)
   );`,
  // 2: a merge version's second parent (the merged source's head).
  `ALTER TABLE versions ADD COLUMN merged TEXT REFERENCES versions(id);`,
  // 3: the usage ledger, one row per query (services and machines add their own kinds).
  `CREATE TABLE usage (
     id INTEGER PRIMARY KEY,
     tenant_id TEXT NOT NULL,
     context TEXT NOT NULL,
     kind TEXT NOT NULL,
     created_at TEXT NOT NULL,
     cpu_ms INTEGER NOT NULL,
     wall_ms INTEGER NOT NULL,
     memory_peak_bytes INTEGER NOT NULL,
     bytes_written INTEGER NOT NULL,
     exit_code INTEGER
   );
   CREATE INDEX usage_tenant_time ON usage(tenant_id, created_at);`,
  // 4: per-tenant quotas (JSON; what is absent falls back to the server's defaults).
  `ALTER TABLE tenants ADD COLUMN quotas TEXT;`,
  // 5: the context a version was committed for (garbage collection keeps unattached versions by it).
  `ALTER TABLE versions ADD COLUMN context TEXT;
   CREATE INDEX versions_context ON versions(tenant_id, context);
   CREATE INDEX versions_merged ON versions(merged);`,
  // 6: services (spec is JSON with its own format number; state lives in the server, not here).
  `CREATE TABLE services (
     tenant_id TEXT NOT NULL,
     context TEXT NOT NULL,
     name TEXT NOT NULL,
     token TEXT NOT NULL UNIQUE,
     spec TEXT NOT NULL,
     created_at TEXT NOT NULL,
     PRIMARY KEY (tenant_id, context, name)
   );`,
  // 7: machines and their snapshots (specs are JSON with their own format number), and the
  //    gateway tokens of machines' exposed ports.
  `CREATE TABLE machines (
     id TEXT PRIMARY KEY,
     tenant_id TEXT NOT NULL,
     state TEXT NOT NULL,
     spec TEXT NOT NULL,
     created_at TEXT NOT NULL
   );
   CREATE INDEX machines_tenant ON machines(tenant_id);
   CREATE TABLE machine_ports (
     token TEXT PRIMARY KEY,
     machine_id TEXT NOT NULL REFERENCES machines(id) ON DELETE CASCADE,
     port INTEGER NOT NULL
   );
   CREATE INDEX machine_ports_machine ON machine_ports(machine_id);
   CREATE TABLE machine_snapshots (
     id TEXT PRIMARY KEY,
     tenant_id TEXT NOT NULL,
     machine_id TEXT NOT NULL,
     spec TEXT NOT NULL,
     created_at TEXT NOT NULL
   );
   CREATE INDEX machine_snapshots_tenant ON machine_snapshots(tenant_id);`,
];

/*
 * 8 (history at scale): what the store counts so nothing walks all history in JavaScript —
 * references to each layer (per tenant in layer_refs, in all in layers.refs) and each tenant's
 * stored bytes; versions committed without moving a head (`detached`); hourly usage rollups;
 * indexes for collection and reports. Existing rows are counted here once.
 */
MIGRATIONS.push(`
  ALTER TABLE versions ADD COLUMN detached INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE layers ADD COLUMN refs INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE tenants ADD COLUMN stored_bytes INTEGER NOT NULL DEFAULT 0;
  CREATE TABLE layer_refs (
    tenant_id TEXT NOT NULL,
    layer_id TEXT NOT NULL,
    refs INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, layer_id)
  );
  CREATE INDEX layer_refs_layer ON layer_refs(layer_id);
  INSERT INTO layer_refs (tenant_id, layer_id, refs)
    SELECT v.tenant_id, j.value, COUNT(*) FROM versions v, json_each(v.layers) j GROUP BY v.tenant_id, j.value;
  UPDATE layers SET refs = COALESCE((SELECT SUM(r.refs) FROM layer_refs r WHERE r.layer_id = layers.id), 0);
  UPDATE tenants SET stored_bytes = COALESCE((SELECT SUM(l.bytes) FROM layer_refs r JOIN layers l ON l.id = r.layer_id WHERE r.tenant_id = tenants.id), 0);
  WITH RECURSIVE reach(id) AS (
    SELECT head FROM contexts
    UNION SELECT v.parent FROM versions v JOIN reach r ON v.id = r.id WHERE v.parent IS NOT NULL
    UNION SELECT v.merged FROM versions v JOIN reach r ON v.id = r.id WHERE v.merged IS NOT NULL
  )
  UPDATE versions SET detached = 1 WHERE context IS NOT NULL AND id NOT IN (SELECT id FROM reach);
  CREATE INDEX versions_tenant_time ON versions(tenant_id, created_at);
  CREATE INDEX versions_detached ON versions(tenant_id, created_at) WHERE detached = 1;
  CREATE INDEX layers_unreferenced ON layers(refs) WHERE refs <= 0;
  CREATE TABLE usage_hourly (
    tenant_id TEXT NOT NULL,
    context TEXT NOT NULL,
    kind TEXT NOT NULL,
    hour TEXT NOT NULL,
    queries INTEGER NOT NULL,
    cpu_ms INTEGER NOT NULL,
    wall_ms INTEGER NOT NULL,
    machine_mb_ms REAL NOT NULL,
    bytes_written INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, hour, context, kind)
  );
`);

/*
 * 9 (networking): a tenant's and a context's egress policies (JSON; null: the one around it),
 * bytes a query, service run or machine segment sent and received through the egress proxy, and
 * the connections it asked for (the audit log, trimmed by age).
 */
MIGRATIONS.push(`
  ALTER TABLE tenants ADD COLUMN network TEXT;
  ALTER TABLE contexts ADD COLUMN network TEXT;
  ALTER TABLE usage ADD COLUMN egress_bytes INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE usage ADD COLUMN ingress_bytes INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE usage_hourly ADD COLUMN egress_bytes INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE usage_hourly ADD COLUMN ingress_bytes INTEGER NOT NULL DEFAULT 0;
  CREATE TABLE egress_log (
    id INTEGER PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    context TEXT NOT NULL,
    kind TEXT NOT NULL,
    time TEXT NOT NULL,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    bytes_out INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL,
    allowed INTEGER NOT NULL,
    reason TEXT
  );
  CREATE INDEX egress_log_context ON egress_log(tenant_id, context, id);
  CREATE INDEX egress_log_time ON egress_log(time);
`);

/*
 * 10 (billing): the active part of a service run's or machine segment's wall time (some request,
 * connection or call in progress): what is billed, beside the wall time operators plan with.
 */
MIGRATIONS.push(`
  ALTER TABLE usage ADD COLUMN active_ms INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE usage_hourly ADD COLUMN active_ms INTEGER NOT NULL DEFAULT 0;
`);

/* 11 (service links): whether a service is shared beyond its context (its spec says with whom). */
MIGRATIONS.push(`
  ALTER TABLE services ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
  CREATE INDEX services_shared ON services(tenant_id, shared);
`);

/*
 * 12 (images and builds): OCI images a tenant named (their root versions are kept like heads),
 * imported layers found by content (`layers.digest`, the OCI diff_id), contexts' defaults and
 * image config (JSON, format 1), and the build cache: a step's key to the version it made.
 */
MIGRATIONS.push(`
  ALTER TABLE layers ADD COLUMN digest TEXT;
  CREATE INDEX layers_digest ON layers(digest) WHERE digest IS NOT NULL;
  ALTER TABLE contexts ADD COLUMN defaults TEXT;
  ALTER TABLE contexts ADD COLUMN config TEXT;
  CREATE TABLE images (
    tenant_id TEXT NOT NULL,
    ref TEXT NOT NULL,
    digest TEXT NOT NULL,
    version TEXT NOT NULL REFERENCES versions(id),
    config TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, ref)
  );
  CREATE INDEX images_version ON images(version);
  CREATE INDEX images_digest ON images(tenant_id, digest);
  CREATE TABLE build_cache (
    tenant_id TEXT NOT NULL,
    key TEXT NOT NULL,
    version TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, key)
  );
  CREATE INDEX build_cache_version ON build_cache(version);
`);

/*
 * 13 (events): tenants' events in one increasing sequence, their webhooks, and each event's
 * delivery to each webhook (queued with the event, tried until delivered or a day old).
 */
MIGRATIONS.push(`
  CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    time TEXT NOT NULL,
    context TEXT,
    machine TEXT,
    data TEXT NOT NULL
  );
  CREATE INDEX events_tenant ON events(tenant_id, id);
  CREATE INDEX events_time ON events(time);
  CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    url TEXT NOT NULL,
    kinds TEXT NOT NULL,
    name TEXT NOT NULL,
    secret TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    format TEXT NOT NULL,
    created_at TEXT NOT NULL
  );
  CREATE INDEX webhooks_tenant ON webhooks(tenant_id, enabled);
  CREATE TABLE webhook_deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_at TEXT NOT NULL,
    claimed_until TEXT,
    last_status INTEGER,
    last_error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  );
  CREATE INDEX webhook_deliveries_due ON webhook_deliveries(state, next_at);
  CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries(tenant_id, webhook_id, id);
  CREATE INDEX webhook_deliveries_event ON webhook_deliveries(event_id);
`);

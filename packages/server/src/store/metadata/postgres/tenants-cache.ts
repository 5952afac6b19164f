import type { NetworkPolicy } from '@shellbase/protocol';
import pg from 'pg';
import type { TenantRow } from '../rows.js';
import { SqlTenants } from '../sql/tenants.js';
import type { PostgresDb } from './postgres-db.js';
import { TENANTS_CHANNEL } from './routines.js';

/** Lookups kept (the oldest goes first past it). */
const MAX_ENTRIES = 10_000;
/** A lookup is read again after this long even if nothing was announced (a bound, not the mechanism). */
const MAX_AGE_MS = 60_000;
/**
 * How often the listening connection is asked a trivial statement, which must come back within
 * the same time: across a partition a connection can be dead without either end being told,
 * and announcements sent meanwhile would be missed.
 */
const PROBE_MS = 5_000;
/** Waits before listening again after the listening connection failed. */
const RELISTEN_MS = [100, 500, 2000, 5000];

/**
 * The tenants repository with API-key lookups kept in memory, so a request does not ask Postgres
 * who its key belongs to each time. Correct across workers: a trigger (routines.ts) announces
 * every change to api_keys and to what a tenant row says (name, admin, quotas, network) on
 * TENANTS_CHANNEL, and every worker listening forgets all it kept. A revoked key thus stops
 * working on every worker as soon as each hears of the revoke (the notification is sent when
 * the revoking transaction commits). While the listening connection is down nothing is kept:
 * every lookup asks Postgres, as without the cache. A lookup that was in flight when a change
 * was announced is not kept (a generation number), so the cache never holds an answer older
 * than the last announcement. Unknown keys are not kept. The connection is probed every PROBE_MS;
 * one that does not answer is taken for lost (so a partition keeps an answer at most about twice
 * PROBE_MS past a change).
 */
export class CachedTenants extends SqlTenants {
  private readonly kept = new Map<string, { row: TenantRow; at: number }>();
  private generation = 0;
  private listener: pg.Client | null = null;
  private listening = false;
  private closed = false;
  private attempt = 0;
  private probe: NodeJS.Timeout | null = null;
  /** Lookups answered from memory since the start (tests, metrics). */
  hits = 0;

  constructor(db: PostgresDb, private readonly url: string) {
    super(db);
  }

  /** Starts listening for changes (the cache is used only while it listens). */
  async listen(): Promise<void> {
    if (this.closed || this.listener) return;
    const client = new pg.Client({ connectionString: this.url });
    this.listener = client;
    const lost = () => {
      if (this.listener !== client) return;
      this.listener = null;
      this.listening = false;
      this.stopProbe();
      this.forget();
      client.end().catch(() => undefined);
      if (this.closed) return;
      const wait = RELISTEN_MS[Math.min(this.attempt++, RELISTEN_MS.length - 1)];
      setTimeout(() => { this.listen().catch(() => undefined); }, wait).unref();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', () => this.forget());
    try {
      await client.connect();
      await client.query(`LISTEN ${TENANTS_CHANNEL}`);
    } catch {
      lost();
      return;
    }
    // What changed while nobody listened is unknown: start empty.
    this.forget();
    this.listening = true;
    this.attempt = 0;
    this.probe = setInterval(() => {
      client.query({ text: 'SELECT 1', query_timeout: PROBE_MS } as pg.QueryConfig).catch(lost);
    }, PROBE_MS);
    this.probe.unref();
  }

  private stopProbe(): void {
    if (this.probe) clearInterval(this.probe);
    this.probe = null;
  }

  /** Forgets every lookup (a change was announced, or announcements may have been missed). */
  forget(): void {
    this.generation++;
    this.kept.clear();
  }

  override async byKey(keyHash: string): Promise<TenantRow | null> {
    const hit = this.kept.get(keyHash);
    if (hit && this.listening && Date.now() - hit.at < MAX_AGE_MS) {
      this.hits++;
      return hit.row;
    }
    const generation = this.generation;
    const row = await super.byKey(keyHash);
    if (row && this.listening && generation === this.generation) {
      if (this.kept.size >= MAX_ENTRIES) this.kept.delete(this.kept.keys().next().value!);
      this.kept.set(keyHash, { row, at: Date.now() });
    }
    return row;
  }

  // This worker's own changes: forgotten at once (the announcement follows for the others).
  override async revokeKeys(tenantId: string, keyId?: string): Promise<number> {
    try { return await super.revokeKeys(tenantId, keyId); } finally { this.forget(); }
  }

  override async setQuotas(id: string, quotas: TenantRow['quotas']): Promise<void> {
    try { await super.setQuotas(id, quotas); } finally { this.forget(); }
  }

  override async setNetwork(id: string, network: NetworkPolicy | null): Promise<void> {
    try { await super.setNetwork(id, network); } finally { this.forget(); }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.listening = false;
    this.stopProbe();
    const client = this.listener;
    this.listener = null;
    await client?.end().catch(() => undefined);
  }
}

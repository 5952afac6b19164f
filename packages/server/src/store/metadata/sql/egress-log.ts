import type { NetworkConnection } from '@shellbase/protocol';
import type { EgressLogRow } from '../rows.js';
import type { EgressLogRepository } from '../types.js';
import type { SqlDb } from './db.js';

interface LogRecord { time: string; host: string; port: number; bytes_out: number; bytes_in: number; allowed: number; reason: string | null; kind: NetworkConnection['kind'] }

/** The egress audit log: every connection a sandbox asked the proxy for, allowed or not, trimmed by age. */
export class SqlEgressLog implements EgressLogRepository {
  constructor(private readonly db: SqlDb) {}

  async record(rows: readonly EgressLogRow[]): Promise<void> {
    if (rows.length === 0) return;
    await this.db.tx(async (db) => {
      for (const r of rows) {
        await db.run(`INSERT INTO egress_log (tenant_id, context, kind, time, host, port, bytes_out, bytes_in, allowed, reason)
          VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, [r.tenantId, r.context, r.kind, r.time, r.host, r.port, r.bytesOut, r.bytesIn, r.allowed ? 1 : 0, r.reason ?? null]);
      }
    });
  }

  async recent(tenantId: string, context: string, limit: number): Promise<NetworkConnection[]> {
    const rows = await this.db.all<LogRecord>(
      'SELECT time, host, port, bytes_out, bytes_in, allowed, reason, kind FROM egress_log WHERE tenant_id = ? AND context = ? ORDER BY id DESC LIMIT ?',
      [tenantId, context, limit]);
    return rows.map((r) => ({
      time: r.time, host: r.host, port: Number(r.port), bytesOut: Number(r.bytes_out), bytesIn: Number(r.bytes_in), allowed: Number(r.allowed) === 1,
      kind: r.kind, ...(r.reason ? { reason: r.reason } : {}),
    }));
  }

  async trim(before: string, limit: number): Promise<number> {
    return this.db.run('DELETE FROM egress_log WHERE id IN (SELECT id FROM egress_log WHERE time < ? ORDER BY id LIMIT ?)', [before, limit]);
  }
}

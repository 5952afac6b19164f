import type { UsageGrouping, UsageRow, UsageTotals } from '../rows.js';
import type { UsageRepository } from '../types.js';
import type { Param, SqlDb } from './db.js';

/** The key a usage row sums under, for the ledger (`created_at`) and the hourly rollup (`hour`). */
const KEYS: Record<UsageGrouping, [ledger: string, hourly: string]> = {
  context: ['context', 'context'],
  kind: ['kind', 'kind'],
  day: ['substr(created_at, 1, 10)', 'substr(hour, 1, 10)'],
  hour: ['substr(created_at, 1, 13)', 'substr(hour, 1, 13)'],
};
/**
 * Machine rows' memory in MiB times their milliseconds: what machineMbSeconds sums. MiB first, so
 * the product is never an integer one (a day of 64 GiB in bytes × ms passes Postgres's BIGINT).
 */
const MB_MS = "CASE WHEN kind = 'machine' THEN wall_ms * (memory_peak_bytes / 1048576.0) ELSE 0 END";

/** The statement that adds rows to the ledger (also run by a cluster's slot release, which carries them). */
export function usageInsert(rows: readonly UsageRow[]): { sql: string; params: Param[] } {
  return {
    sql: `INSERT INTO usage (tenant_id, context, kind, created_at, cpu_ms, wall_ms, memory_peak_bytes, bytes_written, exit_code, egress_bytes, ingress_bytes, active_ms)
      VALUES ${rows.map(() => '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)').join(', ')}`,
    params: rows.flatMap((u) => [u.tenantId, u.context, u.kind, u.createdAt, u.cpuMs, u.wallMs, u.memoryPeakBytes, u.bytesWritten, u.exitCode,
      u.egressBytes ?? 0, u.ingressBytes ?? 0, u.activeMs ?? 0]),
  };
}

/**
 * The usage ledger: a row per query, service run and machine segment, and
 * rows older than a day folded into hourly rows per tenant, context and kind
 * (`rollUp`), so a report costs the same at any age. Reports sum both.
 */
export class SqlUsage implements UsageRepository {
  constructor(private readonly db: SqlDb) {}

  async record(u: UsageRow): Promise<void> {
    const insert = usageInsert([u]);
    await this.db.run(insert.sql, insert.params);
  }

  async totals(tenantId: string, from: string, to: string, groupBy: UsageGrouping): Promise<UsageTotals[]> {
    const [ledger, hourly] = KEYS[groupBy];
    const rows = await this.db.scan<UsageTotals>(
      `SELECT key, SUM(queries) AS queries, SUM(cpu_ms) AS "cpuMs", SUM(wall_ms) AS "wallMs",
         SUM(CASE WHEN kind = 'service' THEN wall_ms ELSE 0 END) / 1000.0 AS "serviceSeconds",
         SUM(CASE WHEN kind = 'machine' THEN wall_ms ELSE 0 END) / 1000.0 AS "machineSeconds",
         SUM(mb_ms) / 1000.0 AS "machineMbSeconds", SUM(bytes_written) AS "bytesWritten", SUM(egress_bytes) AS "egressBytes", SUM(ingress_bytes) AS "ingressBytes",
         SUM(CASE WHEN kind = 'service' THEN active_ms ELSE 0 END) / 1000.0 AS "serviceActiveSeconds",
         SUM(CASE WHEN kind = 'machine' THEN active_ms ELSE 0 END) / 1000.0 AS "machineActiveSeconds"
       FROM (
         SELECT ${ledger} AS key, kind, CASE WHEN kind = 'query' THEN 1 ELSE 0 END AS queries, cpu_ms, wall_ms, ${MB_MS} AS mb_ms, bytes_written, egress_bytes, ingress_bytes, active_ms
           FROM usage WHERE tenant_id = ? AND created_at >= ? AND created_at < ?
         UNION ALL
         SELECT ${hourly} AS key, kind, queries, cpu_ms, wall_ms, machine_mb_ms AS mb_ms, bytes_written, egress_bytes, ingress_bytes, active_ms
           FROM usage_hourly WHERE tenant_id = ? AND hour >= ? AND hour < ?
       ) u GROUP BY key ORDER BY key`,
      [tenantId, from, to, tenantId, from, to],
    );
    return rows.map((r) => ({
      key: r.key, queries: Number(r.queries), cpuMs: Number(r.cpuMs), wallMs: Number(r.wallMs), serviceSeconds: Number(r.serviceSeconds),
      machineSeconds: Number(r.machineSeconds), machineMbSeconds: Number(r.machineMbSeconds), bytesWritten: Number(r.bytesWritten),
      egressBytes: Number(r.egressBytes), ingressBytes: Number(r.ingressBytes),
      serviceActiveSeconds: Number(r.serviceActiveSeconds), machineActiveSeconds: Number(r.machineActiveSeconds),
    }));
  }

  async rollUp(before: string, limit: number): Promise<number> {
    return this.db.tx(async (db) => {
      const last = await db.get<{ id: number }>('SELECT MAX(id) AS id FROM (SELECT id FROM usage WHERE created_at < ? ORDER BY id LIMIT ?) x', [before, limit]);
      if (last?.id === null || last?.id === undefined) return 0;
      const range = 'id <= ? AND created_at < ?';
      await db.run(
        `INSERT INTO usage_hourly (tenant_id, context, kind, hour, queries, cpu_ms, wall_ms, machine_mb_ms, bytes_written, egress_bytes, ingress_bytes, active_ms)
         SELECT tenant_id, context, kind, substr(created_at, 1, 13) || ':00:00.000Z', SUM(CASE WHEN kind = 'query' THEN 1 ELSE 0 END),
           SUM(cpu_ms), SUM(wall_ms), SUM(${MB_MS}), SUM(bytes_written), SUM(egress_bytes), SUM(ingress_bytes), SUM(active_ms)
         FROM usage WHERE ${range} GROUP BY tenant_id, context, kind, substr(created_at, 1, 13)
         ON CONFLICT (tenant_id, hour, context, kind) DO UPDATE SET queries = usage_hourly.queries + excluded.queries,
           cpu_ms = usage_hourly.cpu_ms + excluded.cpu_ms, wall_ms = usage_hourly.wall_ms + excluded.wall_ms,
           machine_mb_ms = usage_hourly.machine_mb_ms + excluded.machine_mb_ms, bytes_written = usage_hourly.bytes_written + excluded.bytes_written,
           egress_bytes = usage_hourly.egress_bytes + excluded.egress_bytes, ingress_bytes = usage_hourly.ingress_bytes + excluded.ingress_bytes,
           active_ms = usage_hourly.active_ms + excluded.active_ms`,
        [last.id, before],
      );
      return db.run(`DELETE FROM usage WHERE ${range}`, [last.id, before]);
    });
  }
}

import type { Logger } from 'pino';
import type { Meter } from '../meter/types.js';
import type { EgressLogRow } from '../store/metadata/rows.js';
import type { EgressLogRepository } from '../store/metadata/types.js';

/** Rows written per transaction, and the longest a row waits for one. */
const BATCH = 200;
const FLUSH_MS = 250;
/** Rows kept waiting at most; past that (the store is far behind) new ones are counted, not kept. */
const BACKLOG = 10_000;

/**
 * The egress audit log's writer: connections are metered at once and written
 * to the store in batches (a sandbox opening connections in a tight loop costs
 * one insert per batch, not per connection).
 */
export class EgressAudit {
  private rows: EgressLogRow[] = [];
  private timer: NodeJS.Timeout | null = null;
  private writing: Promise<void> = Promise.resolve();
  dropped = 0;

  constructor(private readonly log: EgressLogRepository, private readonly meter: Meter, private readonly logger: Logger) {}

  record(row: EgressLogRow): void {
    this.meter.egressConnection(row.kind, row.allowed, row.bytesOut, row.bytesIn);
    if (this.rows.length >= BACKLOG) { this.dropped++; return; }
    this.rows.push(row);
    if (this.rows.length >= BATCH) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), FLUSH_MS);
  }

  /** Writes what waits (called on a timer, when a batch fills, and at shutdown). */
  flush(): Promise<void> {
    if (this.timer) { clearTimeout(this.timer); this.timer = null; }
    const rows = this.rows;
    this.rows = [];
    if (rows.length === 0) return this.writing;
    this.writing = this.writing.then(() => this.log.record(rows)).catch((err) => this.logger.error({ err, rows: rows.length }, 'writing the egress log failed'));
    return this.writing;
  }
}

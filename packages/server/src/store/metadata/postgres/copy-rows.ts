import type { SqlDb } from '../sql/db.js';
import type { PostgresDb } from './postgres-db.js';

type Row = Record<string, unknown>;

/** Rows per INSERT (Postgres takes at most 65,535 parameters a statement). */
const BATCH = 200;
/** Rows read from SQLite at a time (tables but versions). */
const PAGE = 5000;

/**
 * Copies every row of every table of an embedded (SQLite) store into a Postgres store of the same
 * schema number, with the same keys: an upsert by each table's primary key, so a copy cut short
 * and run again converges. Versions go parents first (their foreign keys); identity columns'
 * sequences move past the copied ids. `rewrite` may change a row before it is written (machines'
 * stored files) or drop it (null). Tables Postgres has and SQLite lacks (the cluster's own) are
 * left alone; a table SQLite has and Postgres lacks is refused, named.
 */
export async function copyRows(source: SqlDb, target: PostgresDb, options: {
  rewrite?: (table: string, row: Row) => Row | null;
  progress?: (table: string, rows: number) => void;
} = {}): Promise<Record<string, number>> {
  const tables = (await source.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")).map((t) => t.name);
  const order = ['tenants', 'api_keys', 'layers', 'versions', 'contexts', 'machines'];
  tables.sort((a, b) => rank(order, a) - rank(order, b) || (a < b ? -1 : 1));
  const counts: Record<string, number> = {};
  for (const table of tables) {
    const cols = await source.all<{ name: string; pk: number }>(`PRAGMA table_info(${quoteId(table)})`);
    const theirs = new Set((await target.all<{ column_name: string }>(
      'SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?', [table])).map((c) => c.column_name));
    if (theirs.size === 0) throw new Error(`the Postgres store has no table ${table}: run the same shellbase version on both sides`);
    const missing = cols.filter((c) => !theirs.has(c.name));
    if (missing.length) throw new Error(`the Postgres store's ${table} lacks ${missing.map((c) => c.name).join(', ')}: run the same shellbase version on both sides`);
    const names = cols.map((c) => c.name);
    const keys = cols.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
    const conflict = keys.length === 0 ? 'ON CONFLICT DO NOTHING'
      : names.length > keys.length
        ? `ON CONFLICT (${keys.map(quoteId).join(', ')}) DO UPDATE SET ${names.filter((n) => !keys.includes(n)).map((n) => `${quoteId(n)} = excluded.${quoteId(n)}`).join(', ')}`
        : `ON CONFLICT (${keys.map(quoteId).join(', ')}) DO NOTHING`;
    let copied = 0;
    const write = async (rows: Row[]) => {
      const kept = rows.map((r) => (options.rewrite ? options.rewrite(table, r) : r)).filter((r): r is Row => r !== null);
      for (let i = 0; i < kept.length; i += BATCH) {
        const batch = kept.slice(i, i + BATCH);
        const values = batch.map(() => `(${names.map(() => '?').join(', ')})`).join(', ');
        await target.run(`INSERT INTO ${quoteId(table)} (${names.map(quoteId).join(', ')}) VALUES ${values} ${conflict}`,
          batch.flatMap((r) => names.map((n) => r[n] as never)));
      }
      copied += kept.length;
      options.progress?.(table, copied);
    };
    if (table === 'versions') {
      // Parents first over the whole table (versions are a graph, not a sequence).
      await write(parentsFirst(await source.scan<Row>(`SELECT * FROM ${quoteId(table)}`)));
    } else {
      // A page at a time by rowid: the ledgers (usage, events, the egress log) may be large.
      for (let after = -Infinity; ;) {
        const page = await source.all<Row & { _rowid: number }>(`SELECT rowid AS _rowid, * FROM ${quoteId(table)} WHERE rowid > ? ORDER BY rowid LIMIT ?`,
          [after === -Infinity ? Number.MIN_SAFE_INTEGER : after, PAGE]);
        if (page.length === 0) break;
        after = page[page.length - 1]._rowid;
        await write(page.map(({ _rowid: _r, ...row }) => row));
      }
    }
    const identity = await target.get<{ seq: string | null }>('SELECT pg_get_serial_sequence(?, ?) AS seq', [table, 'id']).catch(() => undefined);
    if (identity?.seq && copied) await target.get(`SELECT setval(?::regclass, GREATEST((SELECT COALESCE(MAX(id), 0) FROM ${quoteId(table)}), 1))`, [identity.seq]);
    counts[table] = copied;
  }
  return counts;
}

/** How many rows each of `tables` holds in `db`. */
export async function countRows(db: SqlDb, tables: readonly string[]): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of tables) out[t] = Number((await db.get<{ n: number | string }>(`SELECT COUNT(*) AS n FROM ${quoteId(t)}`))?.n ?? 0);
  return out;
}

function rank(order: readonly string[], table: string): number {
  const i = order.indexOf(table);
  return i < 0 ? order.length : i;
}

function quoteId(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a table or column name: ${name}`);
  return `"${name}"`;
}

/** Versions ordered so that each comes after its parent and its merged version. */
function parentsFirst(rows: Row[]): Row[] {
  const byId = new Map(rows.map((r) => [r.id as string, r]));
  const done = new Set<string>();
  const out: Row[] = [];
  for (const r of rows) {
    const stack: [Row, boolean][] = [[r, false]];
    while (stack.length) {
      const [v, expanded] = stack.pop()!;
      const id = v.id as string;
      if (done.has(id)) continue;
      if (expanded) { done.add(id); out.push(v); continue; }
      stack.push([v, true]);
      for (const p of [v.parent, v.merged]) {
        const parent = typeof p === 'string' ? byId.get(p) : undefined;
        if (parent && !done.has(p as string)) stack.push([parent, false]);
      }
    }
  }
  return out;
}

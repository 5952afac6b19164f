import type { CommitVersionOptions } from '../rows.js';
import { SqlVersions } from '../sql/versions.js';
import type { PostgresDb } from './postgres-db.js';

/** The shared versions repository, with commits in one round trip (routines.ts, `shellbase_commit_1`) but fenced ones. */
export class PostgresVersions extends SqlVersions {
  constructor(private readonly pdb: PostgresDb) {
    super(pdb);
  }

  override async commit(options: CommitVersionOptions): Promise<boolean> {
    // Work under a lease (services, machines) checks its fence first: the shared transaction does.
    if (options.fence) return super.commit(options);
    const { version: v, layer: l, moveHead: m, requireLayers } = options;
    const row = await this.pdb.get<{ r: string }>('SELECT shellbase_commit_1(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) AS r', [
      v.id, v.tenantId, v.parent, v.merged ?? null, v.context ?? null, v.depth, JSON.stringify(v.layers),
      v.changes === null ? null : JSON.stringify(v.changes), JSON.stringify(v.cause), v.bytes, v.createdAt, m ? 0 : 1,
      l?.id ?? null, l?.kind ?? null, l?.bytes ?? null, l?.createdAt ?? null, l?.digest ?? null,
      m?.tenantId ?? null, m?.context ?? null, m?.expectedHead ?? null, requireLayers ? 1 : 0,
    ]);
    return row?.r === 'ok';
  }
}

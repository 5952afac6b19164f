import path from 'node:path';
import { invalid } from '../../errors.js';
import { SqliteMetadataStore } from './sqlite/sqlite-store.js';
import type { MetadataStore } from './types.js';

export type * from './types.js';
export { SqliteMetadataStore } from './sqlite/sqlite-store.js';
export { SCHEMA_VERSION, SqliteSnapshot } from './sqlite/snapshot.js';

/**
 * The metadata store a URL names (SHELLBASE_METADATA): `postgres://…` or `postgresql://…` (a
 * Postgres database, its schema migrated before this returns), `sqlite:PATH` (a SQLite file;
 * a relative path is under `home`), or nothing: `meta.db` in `home`, the embedded default. pg is
 * loaded only for Postgres.
 */
export async function openMetadataStore(url: string | undefined, home: string): Promise<MetadataStore> {
  if (url === undefined || url === '') return new SqliteMetadataStore(path.join(home, 'meta.db'));
  if (/^postgres(ql)?:\/\//.test(url)) {
    const { PostgresMetadataStore } = await import('./postgres/postgres-store.js');
    return PostgresMetadataStore.open(url);
  }
  if (url.startsWith('sqlite:')) {
    const file = url.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, ''); // sqlite:///abs/path reads as /abs/path
    if (file === '') throw invalid('SHELLBASE_METADATA=sqlite: names no file', 'write sqlite:/var/lib/shellbase/meta.db, or leave it unset for meta.db in the data directory');
    return new SqliteMetadataStore(path.resolve(home, file));
  }
  throw invalid(`SHELLBASE_METADATA names no metadata store shellbase knows: ${url.replace(/\/\/[^@/]*@/, '//…@')}`,
    'write postgres://user:password@host:port/database, sqlite:PATH, or leave it unset for SQLite in the data directory');
}

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { SqliteMetadataStore } from '../../packages/server/src/store/metadata/sqlite/sqlite-store.ts';
import { metadataStoreConformance } from './metadata-store.ts';

metadataStoreConformance('sqlite metadata store', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-meta-'));
  const md = new SqliteMetadataStore(path.join(dir, 'meta.db'));
  return { md, done: async () => { await md.close(); rmSync(dir, { recursive: true, force: true }); } };
});

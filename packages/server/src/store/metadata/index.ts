export type { ContextRow, CommitVersionOptions, LayerRow, MetadataStore, TenantRow, VersionRow } from './types.js';
export { SqliteMetadataStore } from './sqlite/sqlite-store.js';

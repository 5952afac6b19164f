export type { ApiKeyRow, ContextRow, CommitVersionOptions, LayerRow, MetadataStore, NewVersion, TenantRow, VersionRow } from './types.js';
export { SqliteMetadataStore } from './sqlite/sqlite-store.js';

export type { ApiKeyRow, ContextRow, CommitVersionOptions, LayerRow, MetadataStore, NewVersion, TenantRow, UsageRow, UsageTotals, VersionRow } from './types.js';
export { SqliteMetadataStore } from './sqlite/sqlite-store.js';

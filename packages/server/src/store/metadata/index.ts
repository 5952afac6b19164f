export type * from './types.js';
export { SqliteMetadataStore } from './sqlite/sqlite-store.js';

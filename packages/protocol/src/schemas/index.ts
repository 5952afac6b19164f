/**
 * The TypeBox schemas of HTTP API v1, by resource: the server validates requests and writes its
 * OpenAPI document with them, and ../types.ts derives the wire types from them. This entry point
 * (`@shellbase/protocol/schemas`) loads TypeBox; the package's main one does not.
 */
export * from './code.js';
export * from './screen.js';
export * from './common.js';
export * from './contexts.js';
export * from './events.js';
export * from './exec.js';
export * from './files.js';
export * from './images.js';
export * from './machines.js';
export * from './operations.js';
export * from './services.js';
export * from './tenants.js';
export * from './transfer.js';

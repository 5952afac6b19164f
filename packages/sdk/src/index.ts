export { Shellbase, type ShellbaseOptions } from './client.js';
export { ContextHandle, type ExecOptions } from './context.js';
export * from './errors.js';
export type { Context, ExecEvent, ExecRequest, ExecResult, Version, ErrorCode } from '@shellbase/protocol';

import type {
  ApiKey, Context, CreateMachineRequest, CreateServiceRequest, DiffResult, DirEntry, ExecRequest, FileStat,
  Machine, MachineConsole, MachineSnapshot, Service, Tenant, UsageItem, Version,
} from '@shellbase/protocol';
import { api, filePath, ptySocket, request, seg, type RequestOptions } from './client.js';

/** Every call the console makes: public /v1 routes (docs/api.md, the PTY's WebSocket included) and /metrics, nothing else. */
const ctx = (name: string) => `/v1/contexts/${seg(name)}`;
const mach = (id: string) => `/v1/machines/${seg(id)}`;

export type UsageGroup = 'context' | 'kind' | 'day' | 'hour';
export interface Usage { items: UsageItem[]; total: UsageItem }

export const Api = {
  contexts: () => api<{ contexts: Context[] }>('/v1/contexts').then((r) => r.contexts),
  context: (name: string) => api<Context>(ctx(name)),
  createContext: (body: { name: string; image?: string; from?: { context: string; version?: string } }) =>
    api<Context>('/v1/contexts', { method: 'POST', json: body }),
  deleteContext: (name: string) => api<void>(ctx(name), { method: 'DELETE' }),
  fork: (name: string, body: { name: string; version?: string }) => api<Context>(`${ctx(name)}/fork`, { method: 'POST', json: body }),
  versions: (name: string, limit: number, before?: string) =>
    api<{ versions: Version[] }>(`${ctx(name)}/versions`, { query: { limit, before } }).then((r) => r.versions),
  reset: (name: string, version: string) => api<Context>(`${ctx(name)}/reset`, { method: 'POST', json: { version } }),
  merge: (name: string, from: string) => api<{ version: string }>(`${ctx(name)}/merge`, { method: 'POST', json: { from } }),
  diff: (name: string, q: { from?: string; to?: string; path?: string }) => api<DiffResult>(`${ctx(name)}/diff`, { query: q }),

  /** Starts a query streaming NDJSON; the caller reads the events (client.ts `ndjson`). */
  execStream: (name: string, body: ExecRequest, signal?: AbortSignal) =>
    request(`${ctx(name)}/exec`, { method: 'POST', json: body, headers: { accept: 'application/x-ndjson' }, signal }),

  list: (name: string, path: string, version?: string) =>
    api<{ entries: DirEntry[] }>(`${ctx(name)}/files/${filePath(path)}`, { query: { version } }).then((r) => r.entries),
  stat: (name: string, path: string, version?: string) => api<FileStat>(`${ctx(name)}/stat/${filePath(path)}`, { query: { version } }),
  /** A file's bytes; `range` asks for the first bytes only. */
  read: (name: string, path: string, version?: string, range?: number) =>
    request(`${ctx(name)}/files/${filePath(path)}`, { query: { version }, headers: range ? { range: `bytes=0-${range - 1}` } : {} }),
  write: (name: string, path: string, body: Blob | string, mode?: string) =>
    api<{ version: string }>(`${ctx(name)}/files/${filePath(path)}`, {
      method: 'PUT', body, query: { mode }, headers: { 'content-type': 'application/octet-stream' },
    }),
  writeTar: (name: string, dir: string, tar: Blob) =>
    api<{ version: string }>(`${ctx(name)}/files/${filePath(dir)}`, {
      method: 'PUT', body: tar, query: { format: 'tar' }, headers: { 'content-type': 'application/x-tar' },
    }),
  remove: (name: string, path: string, recursive: boolean) =>
    api<{ version: string }>(`${ctx(name)}/files/${filePath(path)}`, { method: 'DELETE', query: { recursive: recursive || undefined } }),

  services: (name: string) => api<{ services: Service[] }>(`${ctx(name)}/services`).then((r) => r.services),
  createService: (name: string, body: CreateServiceRequest) => api<Service>(`${ctx(name)}/services`, { method: 'POST', json: body }),
  stopService: (name: string, svc: string) => api<Service>(`${ctx(name)}/services/${seg(svc)}/stop`, { method: 'POST' }),
  deleteService: (name: string, svc: string) => api<void>(`${ctx(name)}/services/${seg(svc)}`, { method: 'DELETE' }),
  serviceLogs: (name: string, svc: string, tail: number, opts: RequestOptions = {}) =>
    request(`${ctx(name)}/services/${seg(svc)}/logs`, { ...opts, query: { tail } }).then((r) => r.text()),

  machines: () => api<{ machines: Machine[] }>('/v1/machines').then((r) => r.machines),
  machine: (id: string) => api<Machine>(mach(id)),
  createMachine: (body: CreateMachineRequest) => api<Machine>('/v1/machines', { method: 'POST', json: body }),
  machineStep: (id: string, step: 'pause' | 'resume' | 'hibernate' | 'stop') => api<Machine>(`${mach(id)}/${step}`, { method: 'POST' }),
  machineConsole: (id: string, tail: number) => api<MachineConsole>(`${mach(id)}/console`, { query: { tail } }),
  /** The machine's PTY (a WebSocket: browsers cannot set its headers, so the key rides in a subprotocol; docs/security.md). */
  machinePty: (id: string, cols: number, rows: number) => ptySocket(`${mach(id)}/pty`, { cols, rows }),
  deleteMachine: (id: string) => api<void>(mach(id), { method: 'DELETE' }),
  snapshot: (id: string) => api<{ snapshot: string }>(`${mach(id)}/snapshot`, { method: 'POST', json: {} }),
  forkMachine: (id: string, count = 1) => api<{ machines: Machine[] }>(`${mach(id)}/fork`, { method: 'POST', json: { count } }),
  commitMachine: (id: string, context: string) => api<{ version: string }>(`${mach(id)}/commit`, { method: 'POST', json: { context } }),
  exposePort: (id: string, port: number) => api<{ url: string; pathUrl: string }>(`${mach(id)}/ports`, { method: 'POST', json: { port } }),
  machineExecStream: (id: string, body: { command: string; cwd?: string; timeoutMs?: number }, signal?: AbortSignal) =>
    request(`${mach(id)}/exec`, { method: 'POST', json: body, headers: { accept: 'application/x-ndjson' }, signal }),
  snapshots: () => api<{ snapshots: MachineSnapshot[] }>('/v1/snapshots').then((r) => r.snapshots),
  restoreSnapshot: (id: string) => api<{ machines: Machine[] }>(`/v1/snapshots/${seg(id)}/machines`, { method: 'POST', json: {} }),
  deleteSnapshot: (id: string) => api<void>(`/v1/snapshots/${seg(id)}`, { method: 'DELETE' }),

  usage: (q: { groupBy: UsageGroup; from?: string; to?: string; tenant?: string }) => api<Usage>('/v1/usage', { query: q }),
  /** Prometheus text (no key needed; the admin's view shows it). */
  metrics: () => fetch('/metrics').then(async (r) => { if (!r.ok) throw new Error(`/metrics answered ${r.status}`); return r.text(); }),

  tenants: (key?: string) => api<{ tenants: Tenant[] }>('/v1/tenants', { key }).then((r) => r.tenants),
  createTenant: (name: string) => api<{ tenant: Tenant; apiKey: string }>('/v1/tenants', { method: 'POST', json: { name } }),
  revokeTenant: (name: string) => api<void>(`/v1/tenants/${seg(name)}`, { method: 'DELETE' }),
  keys: (tenant: string) => api<{ keys: ApiKey[] }>(`/v1/tenants/${seg(tenant)}/keys`).then((r) => r.keys),
  createKey: (tenant: string) => api<{ key: ApiKey; apiKey: string }>(`/v1/tenants/${seg(tenant)}/keys`, { method: 'POST' }),
  revokeKey: (tenant: string, id: string) => api<void>(`/v1/tenants/${seg(tenant)}/keys/${seg(id)}`, { method: 'DELETE' }),
};

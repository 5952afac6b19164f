import { readFileSync } from 'node:fs';
import pino from 'pino';
import { Registry } from 'prom-client';
import { Shellbase } from '@shellbase/sdk';
import { buildApi } from '../../../packages/server/src/api/server.ts';
import { E2bCompat } from '../../../packages/server/src/compat/e2b/index.ts';
import { Machines } from '../../../packages/server/src/machines/index.ts';
import { Operations } from '../../../packages/server/src/ops/dispatch.ts';
import { HereRouter } from '../../../packages/server/src/ops/routing.ts';
import type { ServerConfig } from '../../../packages/server/src/config.ts';
import { MemoryVmBackend } from '../../../packages/server/src/machines/vm/memory/memory-backend.ts';
import { fakeEngine, type FakeEngine } from '../engine/fake-engine.ts';
import { makeBootable } from '../machines/fast-machines.ts';

export interface FastApi {
  url: string;
  key: string;
  sb: Shellbase;
  fake: FakeEngine;
  /** A raw call (the admin's key unless `key` says otherwise; null: none). */
  http(method: string, path: string, o?: { body?: unknown; key?: string | null; headers?: Record<string, string> }): Promise<{ status: number; json: any }>;
  close(): Promise<void>;
}

export interface FastApiOptions {
  /** Machines over the in-memory VM backend (machines/vm/memory/), the debian image bootable, no ready VMs. */
  vms?: boolean;
}

/**
 * Both front doors (the HTTP API and the E2B-compatible one) over the fast tier's engine: the
 * in-memory snapshotter and runtime and a SQLite file. No root, no sandbox, no QEMU: machines say
 * they need the host's programs (failed_precondition) unless `vms` puts them on in-memory VMs;
 * everything else answers as it does for real.
 */
export async function fastApi(overrides: Partial<ServerConfig> = {}, options: FastApiOptions = {}): Promise<FastApi> {
  const fake = await fakeEngine(overrides);
  const { engine } = fake;
  const log = pino({ level: 'silent' });
  let backend: MemoryVmBackend | undefined;
  if (options.vms) {
    makeBootable(fake.snapshotter, engine.deps.config.cache);
    engine.deps.config.machines.readyPerTemplate = 0;
    backend = new MemoryVmBackend();
  }
  const machines = new Machines(engine.deps, engine.contextAccess(), undefined, backend);
  const ops = new Operations({ engine, machines, events: fake.events }, new HereRouter());
  const e2b = new E2bCompat(ops, {}, log);
  await e2b.open();
  const app = await buildApi({ ops, e2b, log, metrics: new Registry(), http: engine.deps.config.http });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const key = readFileSync(await engine.tenants.ensureAdmin(), 'utf8').trim();
  return {
    url, key, fake, sb: new Shellbase({ url, apiKey: key }),
    async http(method, path, o = {}) {
      const headers: Record<string, string> = { ...o.headers };
      const k = o.key === undefined ? key : o.key;
      if (k !== null) headers.authorization = `Bearer ${k}`;
      if (o.body !== undefined) headers['content-type'] = 'application/json';
      const res = await fetch(`${url}${path}`, { method, headers, body: o.body === undefined ? undefined : JSON.stringify(o.body) });
      const text = await res.text();
      let json: unknown;
      try { json = JSON.parse(text); } catch { json = text; }
      return { status: res.status, json };
    },
    async close() {
      await app.close();
      e2b.close();
      await machines.close();
      await fake.close();
    },
  };
}

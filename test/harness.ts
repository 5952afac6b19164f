import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig, startServer, type RunningServer, type ServerConfig } from '@shellbase/server';
import { Shellbase } from '@shellbase/sdk';

export interface TestServer {
  server: RunningServer;
  sb: Shellbase;
  key: string;
  home: string;
  config: ServerConfig;
  /** A raw HTTP call with the admin key (or `key: null` for none). */
  http(method: string, url: string, opts?: { body?: unknown; raw?: string; key?: string | null; headers?: Record<string, string> }): Promise<{ status: number; json: any; text: string; headers: Headers }>;
  close(): Promise<void>;
}

/** A real server over a throw-away data directory (its own btrfs store, cgroups and SQLite). */
export async function startTestServer(overrides: Partial<ServerConfig> = {}): Promise<TestServer> {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-test-'));
  const config = loadConfig({ home, port: 0, gatewayPort: 0, host: '127.0.0.1', storeSizeGb: 16, ...overrides });
  // Machine tests count QEMU processes and files exactly: no machines restored ahead unless a test
  // asks (test/machines-ready.test.ts does; the bench runs with the server's default).
  if (process.env.SHELLBASE_MACHINES_READY === undefined) config.machines.readyPerTemplate = 0;
  const server = await startServer(config, pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }));
  const key = readFileSync(server.adminKeyFile, 'utf8').trim();
  const sb = new Shellbase({ url: server.url, apiKey: key });
  // `server` may be replaced by a test that restarts it over the same home: always use t.server.
  const t: TestServer = {
    server, sb, key, home, config,
    async http(method, url, opts = {}) {
      const headers: Record<string, string> = { ...(opts.headers ?? {}) };
      const k = opts.key === undefined ? key : opts.key;
      if (k !== null) headers.authorization = `Bearer ${k}`;
      let body: string | undefined = opts.raw;
      if (opts.body !== undefined) { body = JSON.stringify(opts.body); headers['content-type'] = 'application/json'; }
      if (opts.raw !== undefined && !headers['content-type']) headers['content-type'] = 'application/json';
      const res = await fetch(`${t.server.url}${url}`, { method, headers, body });
      const text = await res.text();
      let json: unknown = undefined;
      try { json = JSON.parse(text); } catch { /* not JSON */ }
      return { status: res.status, json, text, headers: res.headers };
    },
    async close() {
      await t.server.close();
      rmSync(home, { recursive: true, force: true });
    },
  };
  return t;
}

/** Pids of the QEMU processes whose command line names `home` (a test server's) and each of `parts`. */
export function qemuProcesses(home: string, ...parts: string[]): string[] {
  return readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
      return cmd.startsWith('qemu-system') && [home, ...parts].every((x) => cmd.includes(x));
    } catch { return false; }
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until `check` holds (polling every 50 ms), or fails with `what` after `ms`. */
export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Ends what a suite of E2B sandboxes left (each one it made killed, then any machine of the admin tenant), then the server. */
export async function closeWithSandboxes(t: TestServer | undefined, made: { kill(): Promise<unknown> }[]): Promise<void> {
  for (const s of made) await s.kill().catch(() => undefined);
  try {
    if (t) for (const m of await t.sb.machines.list()) await t.sb.machines.get(m.id).remove();
  } finally {
    await t?.close();
  }
}

const CLI = path.resolve('packages/cli/dist/main.js');

/** A server in its own process, so that it can be killed with SIGKILL. */
export async function spawnServer(home: string, opts: { ownGroup?: boolean; env?: Record<string, string> } = {}): Promise<{ child: ChildProcess; sb: Shellbase }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--gateway-port', '0'], {
    env: { SHELLBASE_MACHINES_READY: '0', ...process.env, SHELLBASE_HOME: home, SHELLBASE_STORE_SIZE_GB: '16', SHELLBASE_LOG_LEVEL: 'warn', ...opts.env },
    stdio: ['ignore', 'ignore', 'pipe'], detached: opts.ownGroup ?? false,
  });
  let err = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on('data', (c: Buffer) => {
      err += c.toString();
      const m = /serving on (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`server exited (${code}): ${err}`)));
  });
  return { child, sb: new Shellbase({ url, apiKey: readFileSync(path.join(home, 'admin.key'), 'utf8').trim() }) };
}

/** Resolves once `child` has exited (at once when it already has). */
export function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Signals a server started by `spawnServer` and waits for it to end. */
export async function stopServer(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  const done = exited(child);
  child.kill(signal);
  await done;
}

/** A loopback port nothing listens on (it was free a moment ago). */
export async function closedPort(): Promise<number> {
  const { createServer } = await import('node:net');
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as { port: number }).port;
  await new Promise((resolve) => s.close(resolve));
  return port;
}

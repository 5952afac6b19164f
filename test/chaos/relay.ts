import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * How the test process (in the host's network namespace) reaches servers inside the test network
 * without a link between the two: a relay process runs in the switch's namespace and listens on a
 * Unix socket per target (files cross namespaces), and this process listens on 127.0.0.1 and
 * passes each connection to the target's socket. Clients come from the switch's address, as a load
 * balancer's connections would.
 */
export interface Relays {
  /** `http://127.0.0.1:PORT` reaching `host:port` inside the test network. */
  url(target: string): string;
  close(): Promise<void>;
}

const here = fileURLToPath(import.meta.url);

/** `inSwitch`: the path of the switch's namespace; `targets`: `host:port` each. */
export async function startRelays(inSwitch: string, dir: string, targets: string[]): Promise<Relays> {
  const sock = (t: string) => path.join(dir, `${t.replace(/[^0-9A-Za-z]/g, '_')}.sock`);
  const inner = spawn('nsenter', [`--net=${inSwitch}`, process.execPath, here, '--serve', dir, ...targets], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    inner.stdout!.once('data', () => resolve());
    inner.once('exit', (code) => reject(new Error(`the relay exited (${code})`)));
  });
  const servers: Server[] = [];
  const open = new Set<Socket>();
  const urls = new Map<string, string>();
  for (const t of targets) {
    const server = createServer((client) => pipe(client, connect(sock(t)), open));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push(server);
    urls.set(t, `http://127.0.0.1:${(server.address() as { port: number }).port}`);
  }
  return {
    url(t) {
      const u = urls.get(t);
      if (!u) throw new Error(`no relay to ${t}`);
      return u;
    },
    async close() {
      for (const s of open) s.destroy();
      await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
      inner.kill('SIGTERM');
    },
  };
}

function pipe(a: Socket, b: Socket, open: Set<Socket>): void {
  open.add(a).add(b);
  const done = () => { a.destroy(); b.destroy(); open.delete(a); open.delete(b); };
  for (const s of [a, b]) { s.on('error', done); s.on('close', done); }
  a.pipe(b).pipe(a);
}

// The relay inside the switch's namespace: a Unix socket per target, each connection passed on by TCP.
if (process.argv[2] === '--serve') {
  const [dir, ...targets] = process.argv.slice(3);
  const open = new Set<Socket>();
  for (const t of targets) {
    const file = path.join(dir, `${t.replace(/[^0-9A-Za-z]/g, '_')}.sock`);
    rmSync(file, { force: true });
    const [host, port] = t.split(':');
    const server = createServer((client) => pipe(client, connect(Number(port), host), open));
    await new Promise<void>((resolve) => server.listen(file, resolve));
  }
  process.stdout.write('ready\n');
  process.on('SIGTERM', () => process.exit(0));
}

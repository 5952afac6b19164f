import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP relay on 127.0.0.1 in front of another server, that a test can switch off (open
 * connections are cut, new ones are closed at once, as a host gone from the network would) and on
 * again. Tests put it in front of the S3 API to make the object store unavailable.
 */
export interface TcpSwitch {
  /** The relay's URL: `target` with the relay's port. */
  url: string;
  off(): void;
  on(): void;
  close(): Promise<void>;
}

export async function startTcpSwitch(target: string): Promise<TcpSwitch> {
  const to = new URL(target);
  const open = new Set<Socket>();
  let up = true;
  const server: Server = createServer((client) => {
    if (!up) { client.destroy(); return; }
    const upstream = connect(Number(to.port), to.hostname);
    open.add(client);
    open.add(upstream);
    const done = () => { client.destroy(); upstream.destroy(); open.delete(client); open.delete(upstream); };
    for (const s of [client, upstream]) { s.on('error', done); s.on('close', done); }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.port = String((server.address() as { port: number }).port);
  return {
    url: url.href.replace(/\/$/, ''),
    off() {
      up = false;
      for (const s of open) s.destroy();
      open.clear();
    },
    on() { up = true; },
    close: () => new Promise((resolve) => { for (const s of open) s.destroy(); server.close(() => resolve()); }),
  };
}

import { buildImage, loadConfig, startServer } from '@shellbase/server';
import { Shellbase } from '@shellbase/sdk';
import { readFileSync } from 'node:fs';
import { flag, type ParsedArgs } from '../args.js';

/** `shellbase serve [--host H] [--port P] [--gateway-port P] [--demo]` */
export async function serve(args: ParsedArgs): Promise<number> {
  const port = flag(args, 'port');
  const gatewayPort = flag(args, 'gateway-port');
  const config = loadConfig({
    ...(flag(args, 'host') ? { host: flag(args, 'host')! } : {}),
    ...(port ? { port: Number(port) } : {}),
    ...(gatewayPort ? { gatewayPort: Number(gatewayPort) } : {}),
  });
  await buildImage(config.cache, 'debian', (line) => console.error(line));
  const server = await startServer(config);
  const stop = async () => {
    try {
      await server.close();
      process.exit(0);
    } catch (err) {
      console.error('shellbase: stopping failed:', err);
      process.exit(1);
    }
  };
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
  if (args.flags.has('demo')) await ensureDemo(server.url, server.adminKeyFile);
  console.error([
    '',
    `shellbase is serving on ${server.url}`,
    `services answer on ${server.gatewayUrl} (the gateway)`,
    `admin API key: ${server.adminKeyFile}`,
    '',
    'try it:',
    `  curl -s -H "Authorization: Bearer $(cat ${server.adminKeyFile})" -H 'Content-Type: application/json' \\`,
    `    -d '{"command":"cat /root/hello.txt; uname -a"}' ${server.url}/v1/contexts/demo/exec`,
    '',
  ].join('\n'));
  return new Promise<number>(() => undefined);
}

async function ensureDemo(url: string, keyFile: string): Promise<void> {
  const sb = new Shellbase({ url, apiKey: readFileSync(keyFile, 'utf8').trim() });
  // Writes nothing (so makes no version) once the file is there.
  await sb.context('demo').exec('test -f /root/hello.txt || echo "hello from the demo context" > /root/hello.txt');
}

import { readFileSync } from 'node:fs';
import { Shellbase } from '@shellbase/sdk';
import { flag, numberFlag, UsageError, type Command } from '../args.js';

/** The server package, which an install of the CLI alone (from its tarball) does not have. */
export async function server(): Promise<typeof import('@shellbase/server')> {
  try {
    return await import('@shellbase/server');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw e;
    throw new UsageError('this install of shellbase is a client only: the server runs from a checkout (`npm start` there); '
      + 'point this CLI at it with SHELLBASE_URL and SHELLBASE_API_KEY');
  }
}

const SERVE = 'shellbase serve [--host H] [--port P] [--gateway-port P] [--demo]\n'
  + '                [--metadata postgres://… --blobs s3://BUCKET/PREFIX [--s3-endpoint URL] [--advertise URL]]   (a cluster worker: docs/deploy.md)';
const CLUSTER_FLAGS = { metadata: 'SHELLBASE_METADATA', blobs: 'SHELLBASE_BLOBS', 's3-endpoint': 'SHELLBASE_S3_ENDPOINT', advertise: 'SHELLBASE_ADVERTISE' } as const;

/** Commands that run on the server's host: the server itself and what it builds into the cache. */
export const serverCommands: Command[] = [
  {
    name: 'serve',
    spec: {
      usage: SERVE,
      flags: { host: 'string', port: 'string', 'gateway-port': 'string', demo: 'boolean', metadata: 'string', blobs: 'string', 's3-endpoint': 'string', advertise: 'string' },
    },
    async run(args) {
      const { buildImage, clusterFromEnv, loadConfig, startServer } = await server();
      // Flags win over the environment's SHELLBASE_METADATA, SHELLBASE_BLOBS, …
      const env: Record<string, string | undefined> = { ...process.env };
      for (const [name, variable] of Object.entries(CLUSTER_FLAGS)) env[variable] = flag(args, name) ?? env[variable];
      const cluster = clusterFromEnv(env);
      const port = numberFlag(args, 'port', SERVE);
      const gatewayPort = numberFlag(args, 'gateway-port', SERVE);
      const host = flag(args, 'host');
      const config = loadConfig({
        cluster, ...(host ? { host } : {}), ...(port !== undefined ? { port } : {}), ...(gatewayPort !== undefined ? { gatewayPort } : {}),
      });
      await buildImage(config.cache, 'debian', (line) => console.error(line));
      const running = await startServer(config);
      const stop = async () => {
        try {
          await running.close();
          process.exit(0);
        } catch (err) {
          console.error('shellbase: stopping failed:', err);
          process.exit(1);
        }
      };
      process.once('SIGINT', () => void stop());
      process.once('SIGTERM', () => void stop());
      if (args.flags.has('demo')) await ensureDemo(running.url, running.adminKeyFile);
      console.error([
        '',
        `shellbase is serving on ${running.url} (Node.js ${process.versions.node})`,
        `services answer on ${running.gatewayUrl} (the gateway)`,
        `admin API key: ${running.adminKeyFile}`,
        '',
        'try it:',
        `  curl -s -H "Authorization: Bearer $(cat ${running.adminKeyFile})" -H 'Content-Type: application/json' \\`,
        `    -d '{"command":"cat /root/hello.txt; uname -a"}' ${running.url}/v1/contexts/demo/exec`,
        '  shellbase exec demo -- cat /root/hello.txt      (the command is on PATH after the set-up; bin/shellbase in the checkout)',
        '',
      ].join('\n'));
      return new Promise<number>(() => undefined);
    },
  },
  {
    name: 'image build',
    spec: { usage: 'shellbase image build [NAME]          (builds a built-in image into the cache; default debian)', positionals: [0, 1] },
    async run(args) {
      const { buildImage, imageBuilt, imageInfo, loadConfig } = await server();
      const cache = loadConfig().cache;
      const name = args.positionals[0] ?? 'debian';
      if (imageBuilt(cache, name)) console.error(`image ${name} is built: ${imageInfo(cache, name).rootfs}`);
      else await buildImage(cache, name, (l) => console.error(l));
      return 0;
    },
  },
];

async function ensureDemo(url: string, keyFile: string): Promise<void> {
  const sb = new Shellbase({ url, apiKey: readFileSync(keyFile, 'utf8').trim() });
  // Writes nothing (so makes no version) once the file is there.
  await sb.context('demo').exec('test -f /root/hello.txt || echo "hello from the demo context" > /root/hello.txt');
}

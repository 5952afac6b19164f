import { readFileSync } from 'node:fs';
import { Shellbase } from '@shellbase/sdk';
import { flag, numberFlag, UsageError, type Command } from '../args.js';
import { engineBuilder } from './image-build.js';

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

const SERVE = 'shellbase serve [--host H] [--port P] [--gateway-port P] [--demo] [--tls-cert FILE --tls-key FILE]\n'
  + '                [--metadata postgres://… --blobs s3://BUCKET/PREFIX [--s3-endpoint URL] [--advertise URL]\n'
  + '                 [--cluster-secret-file FILE] [--tls-ca FILE [--tls-client-auth]]]   (a cluster worker: docs/deploy.md)';
const CLUSTER_FLAGS = {
  metadata: 'SHELLBASE_METADATA', blobs: 'SHELLBASE_BLOBS', 's3-endpoint': 'SHELLBASE_S3_ENDPOINT', advertise: 'SHELLBASE_ADVERTISE',
  'cluster-secret-file': 'SHELLBASE_CLUSTER_SECRET_FILE', 'tls-ca': 'SHELLBASE_TLS_CA', 'tls-cert': 'SHELLBASE_TLS_CERT', 'tls-key': 'SHELLBASE_TLS_KEY',
} as const;

/** Commands that run on the server's host: the server itself and what it builds into the cache. */
export const serverCommands: Command[] = [
  {
    name: 'serve',
    spec: {
      usage: SERVE,
      flags: {
        host: 'string', port: 'string', 'gateway-port': 'string', demo: 'boolean', metadata: 'string', blobs: 'string', 's3-endpoint': 'string', advertise: 'string',
        'cluster-secret-file': 'string', 'tls-ca': 'string', 'tls-cert': 'string', 'tls-key': 'string', 'tls-client-auth': 'boolean',
      },
    },
    async run(args) {
      const { buildImage, clusterFromEnv, loadConfig, startServer, tlsFromEnv } = await server();
      // Flags win over the environment's SHELLBASE_METADATA, SHELLBASE_BLOBS, …
      const env: Record<string, string | undefined> = { ...process.env };
      for (const [name, variable] of Object.entries(CLUSTER_FLAGS)) env[variable] = flag(args, name) ?? env[variable];
      if (args.flags.has('tls-client-auth')) env.SHELLBASE_TLS_CLIENT_AUTH = '1';
      const cluster = clusterFromEnv(env);
      const tls = tlsFromEnv(env);
      const port = numberFlag(args, 'port', SERVE);
      const gatewayPort = numberFlag(args, 'gateway-port', SERVE);
      const host = flag(args, 'host');
      const config = loadConfig({
        cluster, ...(tls ? { tls } : {}), ...(host ? { host } : {}), ...(port !== undefined ? { port } : {}), ...(gatewayPort !== undefined ? { gatewayPort } : {}),
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
    name: 'admin-key',
    spec: {
      usage: 'shellbase admin-key [--metadata postgres://…|sqlite:PATH]   (makes a new admin API key in the metadata store and prints it; default: SHELLBASE_METADATA, else meta.db in SHELLBASE_HOME)',
      flags: { metadata: 'string' },
    },
    async run(args) {
      const { createAdminKey, loadConfig } = await server();
      const url = flag(args, 'metadata') ?? process.env.SHELLBASE_METADATA;
      const { key, tenantCreated } = await createAdminKey(url || undefined, loadConfig({ cluster: null }).home);
      console.error(tenantCreated ? 'made the admin tenant and its first key:' : 'a new key of the admin tenant (older keys still work: `shellbase key ls admin`, `shellbase key revoke admin KEY_ID`):');
      console.log(key);
      return 0;
    },
  },
  {
    name: 'image build',
    spec: { usage: 'shellbase image build [NAME]          (builds a built-in image into the cache: debian (the default), code-interpreter)', positionals: [0, 1] },
    async run(args) {
      const srv = await server();
      const { buildImage, imageBuilt, imageInfo, loadConfig, IMAGE_NAMES } = srv;
      const cache = loadConfig().cache;
      const name = args.positionals[0] ?? 'debian';
      if (!(IMAGE_NAMES as string[]).includes(name)) throw new UsageError(`unknown image ${JSON.stringify(name)}: the built-in images are ${IMAGE_NAMES.join(', ')}`);
      if (imageBuilt(cache, name)) console.error(`image ${name} is built: ${imageInfo(cache, name).rootfs}`);
      else await buildImage(cache, name, (l) => console.error(l), { dockerfile: engineBuilder(srv) });
      return 0;
    },
  },
];

async function ensureDemo(url: string, keyFile: string): Promise<void> {
  const sb = new Shellbase({ url, apiKey: readFileSync(keyFile, 'utf8').trim() });
  // Writes nothing (so makes no version) once the file is there.
  await sb.context('demo').exec('test -f /root/hello.txt || echo "hello from the demo context" > /root/hello.txt');
}

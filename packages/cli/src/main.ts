#!/usr/bin/env node
import { buildImage, imageBuilt, imageInfo, loadConfig } from '@shellbase/server';
import { ShellbaseError } from '@shellbase/sdk';
import { parseArgs } from './args.js';
import { UsageError, contexts, exec, fork, gc, key, log, tenant, usage } from './commands/client.js';
import { cat, cp, diff, ls, merge, reset } from './commands/files.js';
import { serve } from './commands/serve.js';
import { logs, serveApp, services } from './commands/services.js';
import { machine } from './commands/machines.js';
import { mcp } from './mcp/server.js';

const USAGE = `shellbase: serverless sandboxes over versioned file systems

  shellbase serve [--host H] [--port P] [--gateway-port P] [--demo]
  shellbase exec CTX [--version V] [--timeout MS] [--commit always|on-success|never] -- CMD...
  shellbase contexts
  shellbase log CTX [--limit N]
  shellbase fork CTX NEW [--version V]
  shellbase cat CTX:/path [--version V]
  shellbase ls CTX:/dir [--version V]
  shellbase cp LOCAL CTX:/path [--mode 0644]  |  shellbase cp CTX:/path LOCAL
  shellbase diff CTX [FROM] [TO] [--path /file]
  shellbase merge FROM INTO
  shellbase reset CTX VERSION
  shellbase tenant create NAME | tenant ls | tenant revoke NAME          (admin key)
  shellbase key create TENANT | key ls TENANT | key revoke TENANT KEY_ID   (admin key)
  shellbase usage [--from T] [--to T] [--group-by context|kind] [--tenant NAME]
  shellbase gc                                                            (admin key)
  shellbase serve-app CTX NAME --port P [--idle MS] [--start-timeout MS] -- CMD...
  shellbase services CTX
  shellbase logs CTX NAME [--tail N]
  shellbase mcp [--context NAME] [--http PORT]       MCP tools on stdio (or Streamable HTTP on 127.0.0.1:PORT/mcp)
  shellbase machine create|ls|exec|fork|snapshot|restore|pause|resume|stop|rm|expose|commit|assets  (see shellbase machine)
  shellbase image build [NAME]

Clients read SHELLBASE_URL and SHELLBASE_API_KEY (default: the admin key of a server on this host).`;

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  const args = parseArgs(rest, new Set(['demo']));
  switch (cmd) {
    case 'serve': return serve(args);
    case 'exec': return exec(args);
    case 'contexts': return contexts();
    case 'log': return log(args);
    case 'fork': return fork(args);
    case 'cat': return cat(args);
    case 'ls': return ls(args);
    case 'cp': return cp(args);
    case 'diff': return diff(args);
    case 'merge': return merge(args);
    case 'reset': return reset(args);
    case 'tenant': return tenant(args);
    case 'key': return key(args);
    case 'usage': return usage(args);
    case 'gc': return gc();
    case 'serve-app': return serveApp(args);
    case 'services': return services(args);
    case 'logs': return logs(args);
    case 'mcp': return mcp(args);
    case 'machine': return machine(args);
    case 'image':
      if (args.positionals[0] !== 'build') throw new UsageError('shellbase image build [NAME]');
      {
        const cache = loadConfig().cache;
        const name = args.positionals[1] ?? 'debian';
        if (imageBuilt(cache, name)) console.error(`image ${name} is built: ${imageInfo(cache, name).rootfs}`);
        else await buildImage(cache, name, (l) => console.error(l));
      }
      return 0;
    case undefined: case 'help': case '--help': case '-h':
      console.log(USAGE);
      return 0;
    default:
      throw new UsageError(`unknown command ${cmd}\n\n${USAGE}`);
  }
}

main(process.argv.slice(2)).then((code) => process.exit(code), (err: unknown) => {
  if (err instanceof UsageError) { console.error(err.message); process.exit(2); }
  if (err instanceof ShellbaseError) { console.error(`shellbase: ${err.code}: ${err.message}`); process.exit(1); }
  console.error(err);
  process.exit(1);
});

import { flag, numberFlag, UsageError, type Command } from '../args.js';
import { networkFlag } from './network.js';
import { sb } from './client.js';

const SERVE_APP = 'shellbase serve-app CTX NAME --port P [--idle MS] [--start-timeout MS] [--access url|key] [--network POLICY] -- CMD...';

/** Services: define, list, read logs. */
export const serviceCommands: Command[] = [
  {
    name: 'serve-app',
    spec: { usage: SERVE_APP, flags: { port: 'string', idle: 'string', 'start-timeout': 'string', access: 'string', network: 'string' }, positionals: [2, 2], rest: 'required' },
    async run(args) {
      const [ctx, name] = args.positionals;
      const port = numberFlag(args, 'port', SERVE_APP);
      if (port === undefined) throw new UsageError(`--port is required\n\nusage: ${SERVE_APP}`);
      const idle = numberFlag(args, 'idle', SERVE_APP);
      const start = numberFlag(args, 'start-timeout', SERVE_APP);
      const access = flag(args, 'access');
      if (access !== undefined && access !== 'url' && access !== 'key') throw new UsageError(`--access is url or key\n\nusage: ${SERVE_APP}`);
      const network = networkFlag(args, SERVE_APP);
      const svc = await sb().context(ctx).services.create({
        name, port, command: args.rest.length === 1 ? args.rest[0] : args.rest,
        ...(idle !== undefined ? { idleTimeoutMs: idle } : {}), ...(start !== undefined ? { startTimeoutMs: start } : {}),
        ...(access !== undefined ? { access } : {}), ...(network ? { network } : {}),
      });
      console.log(svc.url);
      console.error(`defined; nothing runs until the first request (also ${svc.pathUrl})`);
      return 0;
    },
  },
  {
    name: 'services',
    spec: { usage: 'shellbase services CTX', positionals: [1, 1] },
    async run(args) {
      for (const s of await sb().context(args.positionals[0]).services.list()) {
        console.log(`${s.name.padEnd(20)} ${s.state.padEnd(9)} ${String(s.port).padStart(5)}  ${s.url}`);
      }
      return 0;
    },
  },
  {
    name: 'logs',
    spec: { usage: 'shellbase logs CTX NAME [--tail N]', flags: { tail: 'string' }, positionals: [2, 2] },
    async run(args) {
      const [ctx, name] = args.positionals;
      const tail = numberFlag(args, 'tail', this.spec.usage);
      process.stdout.write(await sb().context(ctx).services.logs(name, tail !== undefined ? { tail } : {}));
      return 0;
    },
  },
];

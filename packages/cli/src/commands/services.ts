import { durationFlag, flag, numberFlag, UsageError, type Command } from '../args.js';
import type { ServiceShare } from '@shellbase/sdk';
import { networkFlag } from './policy.js';
import { sb } from './client.js';

const SERVE_APP = 'shellbase serve-app CTX NAME --port P [--idle DURATION] [--start-timeout DURATION] [--access url|key] [--network POLICY] [--share tenant|CTX,…] -- CMD...';
const SHARE = 'shellbase services share CTX NAME --with tenant|CTX,…|none';

/** `tenant`, `none` (null) or a comma-separated list of contexts. */
function shareOf(text: string): ServiceShare | null {
  if (text === 'tenant') return 'tenant';
  if (text === 'none') return null;
  return text.split(',').map((c) => c.trim()).filter(Boolean);
}

/** Services: define, list, read logs. */
export const serviceCommands: Command[] = [
  {
    name: 'serve-app',
    spec: { usage: SERVE_APP, flags: { port: 'string', idle: 'string', 'start-timeout': 'string', access: 'string', network: 'string', share: 'string' }, positionals: [2, 2], rest: 'required' },
    async run(args) {
      const [ctx, name] = args.positionals;
      const port = numberFlag(args, 'port', SERVE_APP);
      if (port === undefined) throw new UsageError(`--port is required\n\nusage: ${SERVE_APP}`);
      const idle = durationFlag(args, 'idle', SERVE_APP);
      const start = durationFlag(args, 'start-timeout', SERVE_APP);
      const access = flag(args, 'access');
      if (access !== undefined && access !== 'url' && access !== 'key') throw new UsageError(`--access is url or key\n\nusage: ${SERVE_APP}`);
      const network = networkFlag(args, SERVE_APP);
      const share = flag(args, 'share') === undefined ? null : shareOf(flag(args, 'share')!);
      const svc = await sb().context(ctx).services.create({
        name, port, command: args.rest.length === 1 ? args.rest[0] : args.rest,
        ...(idle !== undefined ? { idleTimeoutMs: idle } : {}), ...(start !== undefined ? { startTimeoutMs: start } : {}),
        ...(access !== undefined ? { access } : {}), ...(network ? { network } : {}), ...(share ? { share } : {}),
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
    name: 'services share',
    spec: { usage: SHARE, flags: { with: 'string' }, positionals: [2, 2] },
    async run(args) {
      const [ctx, name] = args.positionals;
      const to = flag(args, 'with');
      if (to === undefined) throw new UsageError(`--with is required\n\nusage: ${SHARE}`);
      const s = await sb().context(ctx).services.share(name, shareOf(to));
      const who = s.share === undefined ? `context ${ctx} only` : s.share === 'tenant' ? 'every context of the tenant' : `contexts ${s.share.join(', ')}`;
      console.log(`${s.name}.${s.context}.internal:${s.port} — reached from ${who}`);
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

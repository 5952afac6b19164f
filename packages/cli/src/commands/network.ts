import { flag, numberFlag, UsageError, type Command } from '../args.js';
import { sb } from './client.js';
import { parsePolicy, showPolicy } from './policy.js';

const NETWORK = 'shellbase network CTX [none|public|allow:DOMAIN,…|--clear]';
const CONNECT = 'shellbase connect CTX SERVICE [--local-port P] [--host H]';

/** Egress policies, the audit log, and TCP tunnels to services. */
export const networkCommands: Command[] = [
  {
    name: 'network',
    spec: { usage: NETWORK, flags: { clear: 'boolean' }, positionals: [1, 2] },
    async run(args) {
      const [ctx, policy] = args.positionals;
      const handle = sb().context(ctx);
      if (policy !== undefined && args.flags.has('clear')) throw new UsageError(`give a policy or --clear, not both\n\nusage: ${NETWORK}`);
      const n = policy !== undefined ? await handle.network.set(parsePolicy(policy, NETWORK))
        : args.flags.has('clear') ? await handle.network.clear() : await handle.network.get();
      console.log(`policy:    ${n.policy ? showPolicy(n.policy) : "(the tenant's)"}`);
      console.log(`effective: ${showPolicy(n.effective)}`);
      return 0;
    },
  },
  {
    name: 'tenant network',
    spec: { usage: 'shellbase tenant network NAME none|public|allow:DOMAIN,…|--clear   (admin key)', flags: { clear: 'boolean' }, positionals: [1, 2] },
    async run(args) {
      const [name, policy] = args.positionals;
      if ((policy === undefined) === !args.flags.has('clear')) throw new UsageError(`give a policy or --clear\n\nusage: ${this.spec.usage}`);
      const t = await sb().tenants.setNetwork(name, policy === undefined ? null : parsePolicy(policy, this.spec.usage));
      console.log(`tenant ${t.name}: ${t.network ? showPolicy(t.network) : "the server's default (SHELLBASE_EGRESS)"}`);
      return 0;
    },
  },
  {
    name: 'network-log',
    spec: { usage: 'shellbase network-log CTX [--limit N]', flags: { limit: 'string' }, positionals: [1, 1] },
    async run(args) {
      const limit = numberFlag(args, 'limit', this.spec.usage);
      const rows = await sb().context(args.positionals[0]).network.log(limit !== undefined ? { limit } : {});
      for (const c of rows.reverse()) {
        const what = c.allowed ? `${c.bytesOut} B out, ${c.bytesIn} B in` : `refused: ${c.reason ?? ''}`;
        console.log(`${c.time}  ${c.kind.padEnd(7)} ${`${c.host}:${c.port}`.padEnd(40)} ${c.allowed ? 'allowed' : 'REFUSED'}  ${what}${c.allowed && c.reason ? ` (${c.reason})` : ''}`);
      }
      return 0;
    },
  },
  {
    name: 'connect',
    spec: { usage: CONNECT, flags: { 'local-port': 'string', host: 'string' }, positionals: [2, 2] },
    async run(args) {
      const [ctx, service] = args.positionals;
      const port = numberFlag(args, 'local-port', CONNECT);
      const handle = sb().context(ctx);
      const svc = await handle.services.get(service);
      const tunnel = await handle.services.connect(service, {
        ...(port !== undefined ? { port } : {}), host: flag(args, 'host') ?? '127.0.0.1',
        onError: (e) => console.error(`shellbase: ${(e as Error).message}`),
      });
      console.log(`${tunnel.host}:${tunnel.port}`);
      console.error(`tunnelling ${tunnel.host}:${tunnel.port} to service ${service} (port ${svc.port}) of ${ctx}; Ctrl-C stops`);
      await new Promise<void>((resolve) => { process.once('SIGINT', resolve); process.once('SIGTERM', resolve); });
      await tunnel.close();
      return 0;
    },
  },
];

import { EVENT_KINDS, type EventKind, type ShellbaseEvent } from '@shellbase/protocol';
import { flag, listFlag, numberFlag, UsageError, type Command, type ParsedArgs } from '../args.js';
import { sb } from './client.js';

const EVENTS = 'shellbase events [--kind K]… [--context CTX] [--machine ID] [--after ID] [--follow]';
const WEBHOOK_CREATE = 'shellbase webhook create URL --kind K… [--name NAME]';

/** `--kind` values (repeated or comma-separated), checked against the kinds there are. */
function kinds(args: ParsedArgs, usage: string): EventKind[] | undefined {
  const list = listFlag(args, 'kind').flatMap((k) => k.split(',')).map((k) => k.trim()).filter(Boolean);
  if (list.length === 0) return undefined;
  const bad = list.find((k) => !(EVENT_KINDS as readonly string[]).includes(k));
  if (bad !== undefined) throw new UsageError(`unknown event kind ${JSON.stringify(bad)} (kinds: ${EVENT_KINDS.join(', ')})\n\nusage: ${usage}`);
  return list as EventKind[];
}

/** One line per event: id, time, kind, what it concerns, its data. */
const line = (e: ShellbaseEvent) =>
  `${e.id}\t${e.time}\t${e.kind}\t${e.context ?? e.machine ?? '-'}\t${JSON.stringify(e.data)}`;

/** The tenant's events (listed, or followed as they happen) and its webhooks. */
export const eventCommands: Command[] = [
  {
    name: 'events',
    spec: { usage: EVENTS, flags: { kind: 'list', context: 'string', machine: 'string', after: 'string', follow: 'boolean' }, positionals: [0, 0] },
    async run(args) {
      const k = kinds(args, EVENTS);
      const filter = {
        ...(k ? { kinds: k } : {}), ...(flag(args, 'context') !== undefined ? { context: flag(args, 'context')! } : {}),
        ...(flag(args, 'machine') !== undefined ? { machine: flag(args, 'machine')! } : {}), ...(flag(args, 'after') !== undefined ? { after: flag(args, 'after')! } : {}),
      };
      if (!args.flags.has('follow')) {
        for (const e of await sb().events.list(filter)) console.log(line(e));
        return 0;
      }
      const stream = await sb().events.stream(filter, (e) => console.log(line(e)));
      process.once('SIGINT', () => stream.close());
      await stream.done;
      return 0;
    },
  },
  {
    name: 'webhook create',
    spec: { usage: WEBHOOK_CREATE, flags: { kind: 'list', name: 'string' }, positionals: [1, 1] },
    async run(args) {
      const events = kinds(args, WEBHOOK_CREATE);
      if (!events?.length) throw new UsageError(`name at least one --kind\n\nusage: ${WEBHOOK_CREATE}`);
      const name = flag(args, 'name');
      const w = await sb().webhooks.create({ url: args.positionals[0], events, ...(name !== undefined ? { name } : {}) });
      console.log(`webhook ${w.id}: ${w.url} (${w.events.join(', ')})`);
      console.log(`secret: ${w.secret}   (shown once: deliveries carry Shellbase-Signature: t=..,v1=HMAC-SHA256(secret, "t.body"))`);
      return 0;
    },
  },
  {
    name: 'webhook ls',
    spec: { usage: 'shellbase webhook ls', positionals: [0, 0] },
    async run() {
      for (const w of await sb().webhooks.list()) console.log(`${w.id}\t${w.enabled ? 'on' : 'off'}\t${w.url}\t${w.events.join(',')}\t${w.name}`);
      return 0;
    },
  },
  {
    name: 'webhook rm',
    spec: { usage: 'shellbase webhook rm ID', positionals: [1, 1] },
    async run(args) {
      await sb().webhooks.delete(args.positionals[0]);
      return 0;
    },
  },
  {
    name: 'webhook deliveries',
    spec: { usage: 'shellbase webhook deliveries ID [--limit N]', flags: { limit: 'string' }, positionals: [1, 1] },
    async run(args) {
      const limit = numberFlag(args, 'limit', this.spec.usage);
      for (const d of await sb().webhooks.deliveries(args.positionals[0], limit)) {
        console.log(`${d.id}\t${d.state}\t${d.attempts} attempt(s)\tevent ${d.eventId}${d.kind ? ` (${d.kind})` : ''}\t${d.lastStatus ?? '-'}\t${d.lastError ?? ''}`);
      }
      return 0;
    },
  },
];

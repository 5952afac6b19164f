import { flag, type ParsedArgs } from '../args.js';
import { UsageError, need, sb } from './client.js';

/** `shellbase serve-app CTX NAME --port P [--idle MS] [--start-timeout MS] -- CMD...` */
export async function serveApp(args: ParsedArgs): Promise<number> {
  const usage = 'shellbase serve-app CTX NAME --port P [--idle MS] [--start-timeout MS] -- CMD...';
  const [ctx, name] = need(args, 2, usage);
  const port = Number(flag(args, 'port'));
  if (!flag(args, 'port') || args.rest.length === 0) throw new UsageError(usage);
  const idle = flag(args, 'idle');
  const start = flag(args, 'start-timeout');
  const svc = await sb().context(ctx).services.create({
    name, port, command: args.rest.length === 1 ? args.rest[0] : args.rest,
    ...(idle ? { idleTimeoutMs: Number(idle) } : {}), ...(start ? { startTimeoutMs: Number(start) } : {}),
  });
  console.log(svc.url);
  console.error(`defined; nothing runs until the first request (also ${svc.pathUrl})`);
  return 0;
}

/** `shellbase services CTX` */
export async function services(args: ParsedArgs): Promise<number> {
  const [ctx] = need(args, 1, 'shellbase services CTX');
  for (const s of await sb().context(ctx).services.list()) {
    console.log(`${s.name.padEnd(20)} ${s.state.padEnd(9)} ${String(s.port).padStart(5)}  ${s.url}`);
  }
  return 0;
}

/** `shellbase logs CTX NAME [--tail N]` */
export async function logs(args: ParsedArgs): Promise<number> {
  const [ctx, name] = need(args, 2, 'shellbase logs CTX NAME [--tail N]');
  const tail = flag(args, 'tail');
  process.stdout.write(await sb().context(ctx).services.logs(name, tail ? { tail: Number(tail) } : {}));
  return 0;
}

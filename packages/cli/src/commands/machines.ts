import { buildAssets, loadConfig } from '@shellbase/server';
import { flag, type ParsedArgs } from '../args.js';
import { UsageError, need, sb } from './client.js';

const USAGE = `shellbase machine create [--context CTX] [--version V] [--memory MB] [--cpus N] [--idle MS]
  shellbase machine ls | machine snapshots
  shellbase machine exec ID [--timeout MS] -- CMD...
  shellbase machine fork ID [--count N] | machine snapshot ID | machine restore SNAPSHOT [--count N]
  shellbase machine pause|resume|stop|rm ID | machine expose ID PORT | machine commit ID CTX
  shellbase machine assets          (builds the kernel and initramfs into the cache)`;

const num = (args: ParsedArgs, name: string) => { const v = flag(args, name); return v === undefined ? undefined : Number(v); };

/** `shellbase machine …`: microVMs (their ids are printed one per line, for scripts). */
export async function machine(args: ParsedArgs): Promise<number> {
  const [sub, ...rest] = args.positionals;
  const client = sb();
  const id = () => { if (!rest[0]) throw new UsageError(USAGE); return rest[0]; };
  switch (sub) {
    case 'assets':
      {
        const a = await buildAssets(loadConfig().cache, (l) => console.error(l));
        console.error(`machine assets: ${a.dir} (kernel ${a.kernel})`);
      }
      return 0;
    case 'create': {
      const m = await client.machines.create({
        context: flag(args, 'context'), version: flag(args, 'version'), memoryMb: num(args, 'memory'), cpus: num(args, 'cpus'), idleTimeoutMs: num(args, 'idle'),
      });
      console.log(m.id);
      return 0;
    }
    case 'ls':
      for (const m of await client.machines.list()) {
        console.log(`${m.id}  ${m.state.padEnd(10)} ${String(m.memoryMb).padStart(5)} MiB  ${m.context ?? m.image}  ${m.ports.map((p) => `${p.port}=${p.url}`).join(' ')}`);
      }
      return 0;
    case 'snapshots':
      for (const s of await client.machines.snapshots()) console.log(`${s.id}  ${s.machine}  ${s.createdAt}`);
      return 0;
    case 'exec': {
      if (args.rest.length === 0) throw new UsageError('shellbase machine exec ID -- CMD...: nothing to run');
      const abort = new AbortController();
      process.once('SIGINT', () => abort.abort());
      for await (const ev of client.machines.get(id()).execStream(args.rest.length === 1 ? args.rest[0] : args.rest, { timeoutMs: num(args, 'timeout'), signal: abort.signal })) {
        if (ev.type === 'stdout') process.stdout.write(ev.data);
        else if (ev.type === 'stderr') process.stderr.write(ev.data);
        else if (ev.type === 'exit') {
          if (ev.timedOut) console.error('shellbase: timed out');
          if (ev.truncated) console.error('shellbase: output truncated');
          return ev.exitCode;
        }
      }
      return 1;
    }
    case 'fork':
      for (const m of await client.machines.get(id()).fork(num(args, 'count') ?? 1)) console.log(m.id);
      return 0;
    case 'snapshot':
      console.log(await client.machines.get(id()).snapshot());
      return 0;
    case 'restore':
      for (const m of await client.machines.restore(id(), num(args, 'count') ?? 1)) console.log(m.id);
      return 0;
    case 'pause': case 'resume': case 'stop':
      console.log((await client.machines.get(id())[sub]()).state);
      return 0;
    case 'rm':
      await client.machines.get(id()).remove();
      return 0;
    case 'expose': {
      const [, port] = need({ ...args, positionals: rest }, 2, 'shellbase machine expose ID PORT');
      console.log((await client.machines.get(id()).expose(Number(port))).url);
      return 0;
    }
    case 'commit': {
      const [, ctx] = need({ ...args, positionals: rest }, 2, 'shellbase machine commit ID CTX');
      console.log(await client.machines.get(id()).commit(ctx));
      return 0;
    }
    default:
      throw new UsageError(USAGE);
  }
}

import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { latency, pct, round, value, type Bench } from '../lib.ts';

/**
 * Scenario 15, the code interpreter (the `code-interpreter` image, E2B's `code-interpreter-v1`)
 * through the unmodified `@e2b/code-interpreter` SDK, in a client process of its own (this module,
 * forked, taking orders from the bench over IPC). On one running sandbox, in interleaved rounds:
 * `runCode('1+1')` against `commands.run('true')` (the user's login shell through envd) and
 * shellbase's own `machines.get(id).runCode('1+1')`; then 10 MiB of stdout (10,240 lines of 1,024
 * bytes) from a cell against the same bytes from `commands.run`. Then `Sandbox.create()` until the
 * first answer, `code-interpreter-v1` with `runCode('1+1')` against `base` with
 * `commands.run('true')`, each sandbox killed: restored from the template (ready VMs off), and with a
 * ready VM taken (the server's default; the pool full again before each create).
 */
export async function codeInterpreter(b: Bench): Promise<void> {
  const { t } = b;
  const m = t.server.machines;
  const n = b.quick ? 30 : 100;
  const streams = b.quick ? 3 : 5;
  const creates = b.quick ? 5 : 10;
  const readyBefore = t.config.machines.readyPerTemplate;
  t.config.machines.readyPerTemplate = 0; // ready VMs come into their own rows only
  const accel = m.accel()?.accel ?? 'none';
  const name = (what: string) => `code interpreter (${accel}): ${what}`;
  const client = new Client(t.server.url, t.key);
  try {
    for (const image of ['code-interpreter', 'debian']) await (await t.sb.machines.create({ image })).remove(); // builds a template a fresh host lacks

    const r = await client.call<Running>({ op: 'running', n, streams });
    b.baselines.set("commands.run('true')", round(p50(r.commands)));
    latency(b, name("commands.run('true') on a running sandbox (baseline)"), r.commands);
    latency(b, name("runCode('1+1') on a running sandbox, @e2b/code-interpreter"), r.e2b, "commands.run('true')");
    latency(b, name("runCode('1+1') on a running sandbox, shellbase's machines.get(id).runCode"), r.native, "commands.run('true')");
    const mb = STREAM_BYTES / 1e6;
    b.baselines.set('commands.run 10 MiB', round(p50(r.streamCommands)));
    latency(b, name('10 MiB of stdout by commands.run (baseline)'), r.streamCommands);
    latency(b, name('10 MiB of stdout by runCode, @e2b/code-interpreter'), r.streamE2b, 'commands.run 10 MiB');
    latency(b, name("10 MiB of stdout by runCode, shellbase's machines.get(id).runCode"), r.streamNative, 'commands.run 10 MiB');
    for (const [what, s] of [['commands.run', r.streamCommands], ['runCode, @e2b/code-interpreter', r.streamE2b], ["runCode, shellbase's", r.streamNative]] as const) {
      value(b, name(`10 MiB of stdout by ${what}`), 'MB/s', mb / (p50(s) / 1000), 'MB/s', s.length);
    }

    for (const per of [0, 1]) {
      t.config.machines.readyPerTemplate = per;
      const how = per ? 'a ready VM taken' : 'restored';
      const got = { ci: [] as Created[], base: [] as Created[] };
      for (const tpl of TEMPLATES) await client.call<Created>({ op: 'create', template: tpl }); // warms the client; makes the template hot
      for (let i = 0; i < creates; i++) {
        for (const tpl of TEMPLATES) {
          for (;;) {
            if (per) await readyVms(b, 2); // both templates are hot
            const taken = m.readyStats.taken;
            const c = await client.call<Created>({ op: 'create', template: tpl });
            // Ready VMs off: one a template had from before does not count (none is made again).
            if (m.readyStats.taken === taken + per) { got[tpl === 'base' ? 'base' : 'ci'].push(c); break; }
            if (per) throw new Error(`a create of ${tpl} took no ready VM`);
          }
        }
      }
      const baseline = `e2b create base, ${how}`;
      b.baselines.set(baseline, round(p50(got.base.map((c) => c.answered))));
      latency(b, name(`Sandbox.create('base') to the first commands.run('true') result, ${how} (baseline)`), got.base.map((c) => c.answered));
      latency(b, name(`Sandbox.create('code-interpreter-v1') to the first runCode('1+1') result, ${how}`), got.ci.map((c) => c.answered), baseline);
      latency(b, name(`Sandbox.create('base'), the call alone, ${how}`), got.base.map((c) => c.created));
      latency(b, name(`Sandbox.create('code-interpreter-v1'), the call alone, ${how}`), got.ci.map((c) => c.created));
    }
  } finally {
    t.config.machines.readyPerTemplate = readyBefore;
    await client.close();
    for (const left of await t.sb.machines.list()) await t.sb.machines.get(left.id).remove().catch(() => undefined);
  }
}

const TEMPLATES = ['code-interpreter-v1', 'base'] as const;
const p50 = (s: number[]) => pct(s, 50);
const STREAM_BYTES = 10 * 1024 * 1024;
/** 10,240 lines of 1,023 x's and a newline, written 64 lines at a time. */
const STREAM_CELL = "import sys\nchunk = ('x' * 1023 + '\\n') * 64\nfor _ in range(160):\n    sys.stdout.write(chunk)\nsys.stdout.flush()";
/** The same bytes from the shell. */
const STREAM_COMMAND = `yes "$(head -c 1023 /dev/zero | tr '\\0' x)" | head -c ${STREAM_BYTES}`;

async function readyVms(b: Bench, want: number): Promise<void> {
  for (let w = 0; b.t.server.machines.readyStats.ready < want; w++) {
    if (w > 1200) throw new Error(`fewer than ${want} ready VMs after 120 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** What the client measured on one running sandbox, in ms per call. */
interface Running { e2b: number[]; commands: number[]; native: number[]; streamE2b: number[]; streamCommands: number[]; streamNative: number[] }
/** One create: the call alone, and until the first answer. */
interface Created { created: number; answered: number }
type Order = { op: 'running'; n: number; streams: number } | { op: 'create'; template: (typeof TEMPLATES)[number] };
type Reply = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: string };

/** The bench's side of the client process. */
class Client {
  private readonly child: ChildProcess;
  private next = 0;
  private readonly waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  constructor(url: string, key: string) {
    this.child = fork(fileURLToPath(import.meta.url), ['client', url, key], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.child.on('message', (msg: Reply) => {
      const w = this.waiting.get(msg.id);
      this.waiting.delete(msg.id);
      if (msg.ok) w?.resolve(msg.result); else w?.reject(new Error(`code interpreter client: ${msg.error}`));
    });
    this.child.on('exit', (code) => {
      for (const w of this.waiting.values()) w.reject(new Error(`the code interpreter client exited (${code})`));
      this.waiting.clear();
    });
  }

  call<T>(order: Order): Promise<T> {
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.send({ id, ...order });
    });
  }

  /** Disconnects: the client kills what sandboxes it holds and exits. */
  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    if (this.child.connected) this.child.disconnect();
    const timer = setTimeout(() => this.child.kill(), 30_000);
    await exited;
    clearTimeout(timer);
  }
}

/** The client process: the SDKs, a caller's own event loop, orders in and results out by IPC. */
async function client(url: string, key: string): Promise<void> {
  Object.assign(process.env, { E2B_API_URL: url, E2B_SANDBOX_URL: url, E2B_API_KEY: key, E2B_DOMAIN: 'e2b.bench' });
  const { Sandbox } = await import('@e2b/code-interpreter');
  const { Shellbase } = await import('@shellbase/sdk');
  const sb = new Shellbase({ url, apiKey: key });
  const alive = new Set<InstanceType<typeof Sandbox>>();
  const make = async (template: string) => {
    const s = await Sandbox.create(template, { timeoutMs: 3_600_000 });
    alive.add(s);
    return s;
  };
  const kill = async (s: InstanceType<typeof Sandbox>) => { alive.delete(s); await s.kill(); };
  const timed = async (fn: () => Promise<unknown>) => { const t0 = performance.now(); await fn(); return performance.now() - t0; };
  const two = (x: { text?: string }) => { if (x.text !== '2') throw new Error(`runCode('1+1') gave ${JSON.stringify(x.text)}`); };
  const size = (parts: string[]) => { const got = parts.reduce((a, p) => a + p.length, 0); if (got !== STREAM_BYTES) throw new Error(`${got} bytes of stdout, not ${STREAM_BYTES}`); };

  const running = async (n: number, streams: number): Promise<Running> => {
    const s = await make('code-interpreter-v1');
    const machine = sb.machines.get(s.sandboxId);
    const calls = {
      e2b: async () => two(await s.runCode('1+1')),
      commands: () => s.commands.run('true'),
      native: async () => two((await machine.runCode('1+1')).results[0] ?? {}),
      streamE2b: async () => size((await s.runCode(STREAM_CELL, { timeoutMs: 600_000, requestTimeoutMs: 600_000 })).logs.stdout),
      streamCommands: async () => size([(await s.commands.run(STREAM_COMMAND, { timeoutMs: 600_000 })).stdout]),
      streamNative: async () => size((await machine.runCode(STREAM_CELL, { timeoutMs: 600_000 })).stdout),
    };
    const out: Running = { e2b: [], commands: [], native: [], streamE2b: [], streamCommands: [], streamNative: [] };
    try {
      for (const k of ['e2b', 'commands', 'native'] as const) for (let i = 0; i < 5; i++) await calls[k]();
      for (let i = 0; i < n; i++) for (const k of ['e2b', 'commands', 'native'] as const) out[k].push(await timed(calls[k]));
      for (const k of ['streamE2b', 'streamCommands', 'streamNative'] as const) await calls[k]();
      for (let i = 0; i < streams; i++) for (const k of ['streamE2b', 'streamCommands', 'streamNative'] as const) out[k].push(await timed(calls[k]));
    } finally {
      await kill(s);
    }
    return out;
  };

  const create = async (template: string): Promise<Created> => {
    const t0 = performance.now();
    const s = await make(template);
    const created = performance.now() - t0;
    try {
      if (template === 'base') await s.commands.run('true'); else two(await s.runCode('1+1'));
      return { created, answered: performance.now() - t0 };
    } finally {
      await kill(s);
    }
  };

  let queue = Promise.resolve();
  process.on('message', (order: Order & { id: number }) => {
    queue = queue.then(async () => {
      try {
        const result = order.op === 'running' ? await running(order.n, order.streams) : await create(order.template);
        process.send?.({ id: order.id, ok: true, result });
      } catch (e) {
        const what = order.op === 'create' ? `create ${order.template}` : 'running';
        process.send?.({ id: order.id, ok: false, error: `${what}: ${e instanceof Error ? e.stack ?? e.message : String(e)}` });
      }
    });
  });
  process.on('disconnect', () => {
    void queue.then(() => Promise.allSettled([...alive].map((s) => s.kill()))).then(() => process.exit(0));
  });
}

if (process.argv[2] === 'client' && import.meta.url === pathToFileURL(process.argv[1]).href) await client(process.argv[3], process.argv[4]);

// The unmodified E2B SDK in a process of its own (as real callers are), pointed at a shellbase
// server: latencies in ms as JSON on stdout.
// Usage: node bench/e2b-client.mjs URL KEY N
//   create: Sandbox.create() until the first commands.run('echo hi') result (the sandbox killed after, untimed)
//   run:    commands.run('true') on a running sandbox
//   direct: shellbase's own machine exec of `true` on the same sandbox (its machine), interleaved with `run`
import { Sandbox } from 'e2b';
import { Shellbase } from '@shellbase/sdk';

const [url, key, n] = process.argv.slice(2);
Object.assign(process.env, { E2B_API_URL: url, E2B_SANDBOX_URL: url, E2B_API_KEY: key, E2B_DOMAIN: 'e2b.bench' });
const create = [];
for (let i = 0; i <= Number(n); i++) {
  const t = performance.now();
  const s = await Sandbox.create();
  const r = await s.commands.run('echo hi');
  const ms = performance.now() - t;
  await s.kill();
  if (r.stdout !== 'hi\n') throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`);
  if (i > 0) create.push(ms); // the first warms up the client (and the server's JIT)
}
const run = [];
const direct = [];
const s = await Sandbox.create();
const machine = new Shellbase({ url, apiKey: key }).machines.get(s.sandboxId);
try {
  for (let i = 0; i < 5; i++) { await s.commands.run('true'); await machine.exec('true'); }
  for (let i = 0; i < Number(n) * 5; i++) {
    let t = performance.now();
    await s.commands.run('true');
    run.push(performance.now() - t);
    t = performance.now();
    const r = await machine.exec('true');
    direct.push(performance.now() - t);
    if (r.exitCode !== 0) throw new Error(`machine exec exited ${r.exitCode}`);
  }
} finally {
  await s.kill();
}
process.stdout.write(JSON.stringify({ create, run, direct }));

import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { latency, type Bench } from '../lib.ts';

const run = promisify(execFile);

/**
 * Scenario 13, the E2B-compatible API with the unmodified `e2b` SDK in a client process of its
 * own: `Sandbox.create()` until the first `commands.run('echo hi')` result (a machine restored
 * from the debian template, the default user's login shell), and `commands.run('true')` on a
 * running sandbox (`/bin/bash -l -c true` as the user, through envd's Connect stream) against
 * shellbase's own exec of `true` on the same machine, interleaved. One sandbox at a time; the
 * template is built first if the host has none.
 */
export async function e2b(b: Bench): Promise<void> {
  const { t } = b;
  const n = b.quick ? 5 : 20;
  const warm = await t.sb.machines.create(); // builds the template on a fresh host
  await warm.remove();
  const accel = t.server.machines.accel()?.accel ?? 'none';
  const { stdout } = await run(process.execPath, ['bench/e2b-client.mjs', t.server.url, t.key, String(n)], { encoding: 'utf8', maxBuffer: 1 << 20 });
  const r = JSON.parse(stdout) as { create: number[]; run: number[]; direct: number[] };
  latency(b, `e2b sdk (${accel}): Sandbox.create() to the first commands.run('echo hi') result`, r.create, 'machine boot');
  b.baselines.set('machine exec true', latency(b, `e2b sdk (${accel}): shellbase machine exec 'true' on the same sandbox (baseline)`, r.direct));
  latency(b, `e2b sdk (${accel}): commands.run('true') on a running sandbox`, r.run, 'machine exec true');
}
